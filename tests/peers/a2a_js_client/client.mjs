// The pair matrix's second A2A client: the official @a2a-js/sdk (pinned in package.json),
// every kind of one (front, back) pair in one node process.
//
//     node client.mjs '{"url", "route", "binding": "JSONRPC"|"HTTP+JSON", "kinds": [...]}'
//
// It reads the route's agent card with the SDK's resolver, builds its client with
// `ClientFactory` preferring the asked binding (A2A 1.0), and runs each kind as one
// streamed task (`SendStreamingMessage`): a question (TASK_STATE_INPUT_REQUIRED) is
// answered by the next message on the task, by option kind when the options carry
// kinds, else by label (`{"selected": [...], "text"?}` as a data part); a cancel is
// `CancelTask` after the first artifact chunk. Prints `{kind: {"events": [...], "error"?}}`
// with each event as the SDK's own `StreamResponse.toJSON` renders it (the proto JSON
// tests/matrix/fold_a2a.py reads, as for a2a-sdk's column).

import { Message, StreamResponse, Task } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions } from "@a2a-js/sdk/client";

const opts = JSON.parse(process.argv[2]);
let n = 0;

function message(text, { taskId = "", data } = {}) {
  n += 1;
  const parts = [];
  if (text !== undefined) parts.push({ text });
  if (data !== undefined) parts.push({ data });
  return Message.fromJSON({ messageId: `js-client-${n}`, role: "ROLE_USER", parts, taskId });
}

function answerFor(question, answer) {
  const data = (question.parts || []).map((p) => p.data).find((v) => v && typeof v === "object") || {};
  const options = data.options || [];
  const byKind = options.filter((o) => answer.option_kind && o.kind === answer.option_kind).map((o) => o.id);
  if (byKind.length) return { selected: byKind.slice(0, 1) };
  const out = { selected: answer.selected && answer.selected.length ? answer.selected : answer.label ? [answer.label] : [] };
  if (answer.text) out.text = answer.text;
  return out;
}

function error(exc) {
  return { error: exc?.constructor?.name || "Error", message: String(exc?.message ?? exc) };
}

async function runKind(client, kind, out) {
  const events = out.events;
  const signal = AbortSignal.timeout((opts.timeout_s || 60) * 1000);
  let msg = message(kind.prompt);
  let cancel = null;
  for (let round = 0; round < 4; round++) {
    let waiting = null;
    let taskId = "";
    for await (const ev of client.sendMessageStream({ message: msg }, { signal })) {
      const e = StreamResponse.toJSON(ev);
      events.push(e);
      const body = e.task || e.statusUpdate || e.artifactUpdate || {};
      taskId = body.taskId || (e.task && e.task.id) || taskId;
      if (kind.cancel && cancel === null && e.artifactUpdate) {
        cancel = client.cancelTask({ id: taskId }).then((t) => Task.toJSON(t), error);
      }
      const status = (e.statusUpdate || e.task || {}).status || {};
      if (status.state === "TASK_STATE_INPUT_REQUIRED") waiting = status.message || {};
    }
    if (waiting === null || !kind.answer) break;
    msg = message(undefined, { taskId, data: answerFor(waiting, kind.answer) });
  }
  if (cancel !== null) out.cancel = await cancel;
}

async function main() {
  const results = {};
  try {
    const base = `${opts.url}/a2a/${opts.route}`;
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [opts.binding] }),
    );
    const client = await factory.createFromUrl(`${base}/.well-known/agent-card.json`, "");
    const { protocolName, protocolVersion } = client.transport;
    if (protocolName !== opts.binding || protocolVersion !== "1.0") {
      throw new Error(`the SDK chose ${protocolName} ${protocolVersion}, not ${opts.binding} 1.0, from the card`);
    }
    for (const kind of opts.kinds) {
      const out = (results[kind.name] = { events: [] });
      try {
        await runKind(client, kind, out);
      } catch (exc) {
        out.error = error(exc);
      }
    }
  } catch (exc) {
    results.crash = `${error(exc).error}: ${error(exc).message}`;
  }
  process.stdout.write(JSON.stringify(results) + "\n");
}

await main();
