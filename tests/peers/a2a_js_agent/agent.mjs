// The pair matrix's A2A agent on the official @a2a-js/sdk server (express), A2A 1.0.
//
//   node agent.mjs
//
// Binds 127.0.0.1 on a port the OS picks and prints `PORT <n>`. It speaks the demo's
// words (tests/matrix/kinds.py) as far as A2A can say them, like tests/peers/a2a_matrix.py:
// the answer as chunks of one artifact; `data:` a data part and `image:` a raw image and
// a url part in it; `progress:` a WORKING status message; `ask:` / `choose:`
// INPUT_REQUIRED with the option data agent-bridge reads, answered by the next message on
// the task; `fail:` FAILED and `refuse:` REJECTED with their message; `slow:` chunks
// until CancelTask. Thought, plan, tool calls, sub-agents, usage and max-tokens have no
// A2A form: those words change nothing but the answer.

import { randomUUID } from "node:crypto";
import express from "express";
import { AGENT_CARD_PATH, Role, TaskState } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from "@a2a-js/sdk/server/express";

// The demo's values (tests/matrix/kinds.py).
const DATA = { key: "value", count: 42, ratio: 0.5, nested: { ok: true, none: null } };
const PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";
const WORDS = new Set(["think", "plan", "tool", "ask", "choose", "fork", "progress", "data", "image", "slow", "fail", "refuse", "max_tokens", "max_turns"]);
const PERMISSION = {
  options: [
    { id: "allow", label: "Allow", kind: "allow_once" },
    { id: "allow_always", label: "Always allow", kind: "allow_always" },
    { id: "reject", label: "Reject", kind: "reject_once" },
    { id: "reject_always", label: "Never allow", kind: "reject_always" },
  ],
};
const COLOURS = {
  options: [{ id: "red", label: "Red" }, { id: "green", label: "Green" }, { id: "blue", label: "Blue" }],
  multiSelect: true,
  allowText: true,
};

function parse(text) {
  const words = new Set();
  const re = /^\s*(?:\/([a-z_]+)\b|([a-z_]+):(\d*))/;
  for (;;) {
    const m = re.exec(text);
    if (!m || !WORDS.has(m[1] || m[2])) return { words, rest: text.trim() };
    words.add(m[1] || m[2]);
    text = text.slice(m[0].length);
  }
}

const part = (content, extra = {}) => ({ content, metadata: undefined, filename: "", mediaType: "", ...extra });
const text = (value) => part({ $case: "text", value });
const data = (value) => part({ $case: "data", value });

class MatrixExecutor {
  waiting = new Map(); // task id → {word, words, rest}
  cancelled = new Set();
  contexts = new Map(); // task id → its context id

  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const msg = ctx.userMessage;
    this.contexts.set(taskId, contextId);
    const say = (parts) => ({ messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT, parts, metadata: undefined, extensions: [], referenceTaskIds: [] });
    const status = (state, message) =>
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, message, timestamp: new Date().toISOString() }, metadata: undefined }));
    let sent = false;
    const add = (parts, last = false) => {
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: sent, lastChunk: last, metadata: undefined,
        artifact: { artifactId: "answer", name: "answer", description: "", parts, metadata: undefined, extensions: [] },
      }));
      sent = true;
    };
    const words_ = (s) => { for (const w of s.split(" ")) add([text(w + " ")]); };
    const finish = (words, rest) => {
      if (words.has("fail")) return status(TaskState.TASK_STATE_FAILED, say([text("the agent failed on purpose (prompt began with fail:)")]));
      if (words.has("refuse")) return status(TaskState.TASK_STATE_REJECTED, say([text("I won't do that.")]));
      if (words.has("data")) add([data(DATA)]);
      if (words.has("image")) {
        add([
          part({ $case: "raw", value: Buffer.from(PIXEL_PNG, "base64") }, { mediaType: "image/png", filename: "pixel.png" }),
          part({ $case: "url", value: "file:///README.md" }, { mediaType: "text/markdown", filename: "README.md" }),
        ]);
      }
      words_("You said:");
      add([text(rest)], true);
      status(TaskState.TASK_STATE_COMPLETED, undefined);
    };

    // Every execute publishes a task first (the SDK's rule), a follow-up too.
    const task = ctx.task ?? { id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined }, artifacts: [], history: [msg], metadata: undefined };
    bus.publish(AgentEvent.task(task));
    status(TaskState.TASK_STATE_WORKING, undefined);
    const waiting = this.waiting.get(taskId);
    if (waiting) {
      this.waiting.delete(taskId);
      let answer = {};
      for (const p of msg.parts) if (p.content?.$case === "data" && p.content.value && typeof p.content.value === "object") answer = p.content.value;
      const selected = (answer.selected || []).map(String);
      if (waiting.word === "ask") {
        words_(selected.length && selected[0].startsWith("allow") ? "Edited notes.txt." : "Understood, I left notes.txt alone.");
      } else {
        const picked = COLOURS.options.filter((o) => selected.includes(o.id)).map((o) => o.label);
        if (answer.text) picked.push(String(answer.text));
        words_(`You chose: ${picked.join(", ")}.`);
      }
      finish(waiting.words, waiting.rest);
      bus.finished();
      return;
    }
    const input = msg.parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join(" ");
    const { words, rest } = parse(input);
    if (words.has("progress")) status(TaskState.TASK_STATE_WORKING, say([text("Working on it.")]));
    for (const [word, options, prompt] of [["ask", PERMISSION, "Edit notes.txt?"], ["choose", COLOURS, "Which colours do you like?"]]) {
      if (words.has(word)) {
        this.waiting.set(taskId, { word, words, rest });
        status(TaskState.TASK_STATE_INPUT_REQUIRED, say([text(prompt), data(options)]));
        bus.finished();
        return;
      }
    }
    if (words.has("slow")) {
      for (let i = 1; i <= 100; i++) {
        if (this.cancelled.has(taskId)) return;
        add([text(`tick ${i}. `)]);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    if (this.cancelled.has(taskId)) return;
    finish(words, rest);
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    this.cancelled.add(taskId);
    this.waiting.delete(taskId);
    const contextId = this.contexts.get(taskId) ?? "";
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() }, metadata: undefined }));
    bus.finished();
  }
}

const app = express();
const server = app.listen(0, "127.0.0.1", () => {
  const port = server.address().port;
  const base = `http://127.0.0.1:${port}`;
  const card = {
    name: "Matrix Agent (a2a-js)",
    description: "The pair matrix's A2A agent on @a2a-js/sdk.",
    version: "1.0.0",
    supportedInterfaces: [
      { url: `${base}/a2a/jsonrpc`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" },
      { url: `${base}/a2a/rest`, protocolBinding: "HTTP+JSON", tenant: "", protocolVersion: "1.0" },
    ],
    provider: undefined,
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain", "application/json", "image/png"],
    skills: [{ id: "matrix", name: "Matrix", description: "Speaks the demo agent's words", tags: ["test"], examples: ["hello there"], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new MatrixExecutor());
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use("/a2a/jsonrpc", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  app.use("/a2a/rest", restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  process.stdout.write(`PORT ${port}\n`);
});
process.on("SIGTERM", () => { server.closeAllConnections(); server.close(() => process.exit(0)); });
