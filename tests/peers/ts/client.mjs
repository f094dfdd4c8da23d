#!/usr/bin/env node
// Test peer: the official TypeScript ACP SDK (@agentclientprotocol/sdk, app API)
// as the client that spawns and drives a real `agent-bridge acp` process.
//
//   node client.mjs SCENARIO [--session ID] -- BRIDGE_COMMAND [ARGS...]
//
// Scenarios (demo route prompt words, see bridge/backs/demo/back.py):
//   allow   new session, prompt "all: hi", every permission answered allow_once
//   reject  new session, prompt "ask: x", the permission answered reject_once
//   cancel  new session, prompt "slow: x", session/cancel after the first agent chunk
//   seed    new session, two finished turns ("think: one", "tool: two"), then exit
//   reload  session/list, then session/load --session ID, then prompt "again" in it
//
// Prints one JSON report on stdout (also when something fails: then `error` is set
// and the exit status is 1). The report carries the raw wire traffic in both
// directions, the updates as the SDK parsed them, the permission requests seen,
// the results, any error the SDK logged (it logs, and drops, notifications that
// fail its zod validation) and the bridge's exit status and stderr.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

// The SDK's generated zod validators for the stable v1 schema. The package does not
// export them, so import the file (the SDK version is pinned in package.json).
const zod = await import(new URL("./node_modules/@agentclientprotocol/sdk/dist/v1/schema/zod.gen.js", import.meta.url));

const SCENARIOS = new Set(["allow", "reject", "cancel", "seed", "reload"]);
const DEADLINE_MS = Number(process.env.ACP_TS_DEADLINE_MS ?? 60000);

function parseArgs(argv) {
  const sep = argv.indexOf("--");
  if (sep < 0 || sep === argv.length - 1) usage("missing -- BRIDGE_COMMAND");
  const head = argv.slice(0, sep);
  const command = argv.slice(sep + 1);
  const scenario = head.shift();
  if (!SCENARIOS.has(scenario)) usage(`unknown scenario ${JSON.stringify(scenario)}`);
  let sessionId = null;
  while (head.length) {
    const opt = head.shift();
    if (opt === "--session") sessionId = head.shift();
    else usage(`unknown option ${opt}`);
  }
  if (scenario === "reload" && !sessionId) usage("reload needs --session ID");
  return { scenario, sessionId, command };
}

function usage(msg) {
  process.stderr.write(`client.mjs: ${msg}\nusage: node client.mjs SCENARIO [--session ID] -- BRIDGE_COMMAND [ARGS...]\n`);
  process.exit(64);
}

const { scenario, sessionId: loadId, command } = parseArgs(process.argv.slice(2));
const t0 = performance.now();
const now = () => Math.round((performance.now() - t0) * 10) / 10;

const report = {
  scenario,
  sdk: { name: "@agentclientprotocol/sdk", protocolVersion: PROTOCOL_VERSION },
  node: process.version,
  wire: [], // every JSON-RPC message, in order: {dir: "in"|"out", t, msg}
  updates: [], // session/update params as the SDK delivered them (after its zod parse)
  permissions: [], // session/request_permission params, with our answer
  results: {}, // name → result of an agent request
  schemaErrors: [], // results that fail the SDK's own zod schema
  sdkErrors: [], // what the SDK logged with console.error (e.g. invalid notifications)
  marks: {}, // name → time (ms since start)
  error: null,
  bridge: { exitCode: null, signal: null, stderr: "" },
};

// The SDK reports invalid incoming messages with console.error and goes on.
const consoleError = console.error;
console.error = (...args) => {
  report.sdkErrors.push(args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" "));
  consoleError(...args);
};

function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

function checkSchema(name, validator, value) {
  const r = validator.safeParse(value);
  if (!r.success) report.schemaErrors.push({ name, issues: r.error.issues });
}

// -- spawn the bridge -------------------------------------------------------------------
const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
const exited = new Promise((resolve) => {
  child.on("exit", (code, signal) => {
    report.bridge.exitCode = code;
    report.bridge.signal = signal;
    resolve();
  });
  child.on("error", (err) => {
    report.error = report.error ?? `could not spawn ${command[0]}: ${err.message}`;
    resolve();
  });
});
child.stderr.setEncoding("utf8");
child.stderr.on("data", (s) => {
  report.bridge.stderr += s;
});
child.stdin.on("error", () => {}); // EPIPE if the bridge dies first; the report shows it

const raw = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
// Tap both directions so the report shows the exact wire order.
const tap = (dir) =>
  new TransformStream({
    transform(msg, ctl) {
      report.wire.push({ dir, t: now(), msg });
      ctl.enqueue(msg);
    },
  });
const fromAgent = tap("in");
const toAgent = tap("out");
raw.readable.pipeTo(fromAgent.writable).catch(() => {});
toAgent.readable.pipeTo(raw.writable).catch(() => {});
const stream = { readable: fromAgent.readable, writable: toAgent.writable };

// -- the client app -----------------------------------------------------------------------
let cancelling = false;
const firstAgentChunk = {};
firstAgentChunk.promise = new Promise((resolve) => (firstAgentChunk.resolve = resolve));

const app = client({ name: "agent-bridge-ts-peer" })
  .onNotification(methods.client.session.update, ({ params }) => {
    report.updates.push({ t: now(), ...params });
    if (params.update.sessionUpdate === "agent_message_chunk") firstAgentChunk.resolve();
  })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    let outcome;
    if (cancelling) {
      outcome = { outcome: "cancelled" }; // required once we sent session/cancel
    } else {
      const want = scenario === "reject" ? "reject_once" : "allow_once";
      const option = params.options.find((o) => o.kind === want);
      outcome = option ? { outcome: "selected", optionId: option.optionId } : { outcome: "cancelled" };
    }
    report.permissions.push({ t: now(), params, outcome });
    return { outcome };
  });

async function newSession(ctx) {
  const res = await ctx.request(methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
  checkSchema("session/new", zod.zNewSessionResponse, res);
  report.results.new = res;
  return res.sessionId;
}

async function prompt(ctx, name, sessionId, text) {
  report.marks[`${name}:sent`] = now();
  const res = await ctx.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
  report.marks[`${name}:answered`] = now();
  checkSchema(`session/prompt ${name}`, zod.zPromptResponse, res);
  report.results[name] = res;
  return res;
}

async function run(ctx) {
  const init = await ctx.request(methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "agent-bridge-ts-peer", version: "1.0.0" },
  });
  checkSchema("initialize", zod.zInitializeResponse, init);
  report.results.initialize = init;

  if (scenario === "allow") {
    await prompt(ctx, "prompt", await newSession(ctx), "all: hi");
  } else if (scenario === "reject") {
    await prompt(ctx, "prompt", await newSession(ctx), "ask: x");
  } else if (scenario === "cancel") {
    const sid = await newSession(ctx);
    const pending = prompt(ctx, "prompt", sid, "slow: x");
    await Promise.race([firstAgentChunk.promise, pending]);
    cancelling = true;
    report.marks.cancel = now();
    await ctx.notify(methods.agent.session.cancel, { sessionId: sid });
    await pending;
  } else if (scenario === "seed") {
    const sid = await newSession(ctx);
    await prompt(ctx, "one", sid, "think: one");
    await prompt(ctx, "two", sid, "tool: two");
  } else if (scenario === "reload") {
    const list = await ctx.request(methods.agent.session.list, {});
    checkSchema("session/list", zod.zListSessionsResponse, list);
    report.results.list = list;
    report.marks["load:sent"] = now();
    const loaded = await ctx.request(methods.agent.session.load, { sessionId: loadId, cwd: process.cwd(), mcpServers: [] });
    report.marks["load:answered"] = now();
    checkSchema("session/load", zod.zLoadSessionResponse, loaded ?? {});
    report.results.load = loaded ?? null;
    await prompt(ctx, "again", loadId, "again");
  }
}

const deadline = setTimeout(() => {
  report.error = `scenario ${scenario} did not finish within ${DEADLINE_MS} ms`;
  finish(2);
}, DEADLINE_MS);

let finished = false;
async function finish(status) {
  if (finished) return;
  finished = true;
  clearTimeout(deadline);
  // Closing stdin is how an editor says goodbye: the bridge should exit by itself.
  try {
    child.stdin.end();
  } catch {}
  const gone = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
  if (!gone) {
    report.bridge.leftRunning = true;
    child.kill("SIGKILL");
    await exited;
  }
  process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(status));
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms).unref());
}

try {
  await app.connectWith(stream, run);
  await finish(report.error ? 1 : 0);
} catch (err) {
  report.error = err instanceof Error ? `${err.name}: ${err.message}${err.data ? " " + safeJson(err.data) : ""}` : safeJson(err);
  await finish(1);
}
