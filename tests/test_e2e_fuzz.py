"""End-to-end fuzz: mutated traffic at a running `agent-bridge serve` on every front (issue 13).

Valid requests of each protocol are mutated by a seeded mutator (bit flips, truncation,
invalid UTF-8 inside strings, integers beyond 64 bits, deep nesting, wrong types,
unknown or missing keys, oversized values, raw garbage) and sent:

- A2A JSON-RPC (1.0 and 0.3) and HTTP+JSON POSTs, REST POSTs, `/mcp` POSTs: each answer
  is an HTTP answer that is not 5xx; a JSON-RPC answer is a JSON-RPC response;
- `/ws` frames (text and binary, on a raw WebSocket): after each, a probe frame is
  answered; a close is allowed only with a client-fault code (never 1011);
- ACP lines on the daemon's unix socket (preamble included) and on `agent-bridge acp`
  stdio: after each, a probe request is answered; no -32603 (internal error: our bug);
  the connection is never dropped.

Then the daemon must still serve a normal turn on every front, and have logged no
traceback. The budget is `AGENT_BRIDGE_FUZZ_BUDGET` mutants per front (default 300),
the seed `AGENT_BRIDGE_FUZZ_SEED` (default 13): a failure names its seed and case so
it can be replayed.
"""

from __future__ import annotations

import copy
import json
import os
import random
import struct
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon_support import Daemon, RawWs, assert_serves_every_front, base_config, demo_route, start_daemon, toml

BUDGET = int(os.environ.get("AGENT_BRIDGE_FUZZ_BUDGET", "300"))
SEED = int(os.environ.get("AGENT_BRIDGE_FUZZ_SEED", "13"))
LIMIT = 64 * 1024  # max_body_bytes, [ws] and [acp] max_frame_bytes: oversized stays cheap
CEILING_S = 120 + BUDGET // 5
V10 = {"A2A-Version": "1.0"}
MAX_REPORTED = 12


# -- the mutator ----------------------------------------------------------------------------------


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*path, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


class Mutator:
    """Seeded, so a failing case replays: `Mutator(seed).mutate(seed_doc)` is deterministic."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def _weird(self) -> Any:
        r = self.rng
        return r.choice([
            None, True, 0, -1, 1.5, "", "x" * r.randint(1, 40), [], {}, [1, "a"], {"a": {"b": []}},
            2**64, -(2**64), 10**30, -(2**63) - 1, 1e308, "\u0000", "\ufffd",
        ])  # fmt: skip

    def _tree(self, doc: Any) -> tuple[str, Any]:
        r = self.rng
        doc = copy.deepcopy(doc)
        path = r.choice(_paths(doc))
        kind = r.choice(["type", "int", "drop", "unknown", "deep", "big", "meta_int"])
        if kind == "type":
            return kind, _set(doc, path, self._weird())
        if kind == "int":
            return kind, _set(doc, path, r.choice([2**64, -(2**64) - 1, 2**200, -(2**63) - 1]))
        if kind == "drop" and path:
            parent = _get(doc, path[:-1])
            del parent[path[-1]]
            return kind, doc
        if kind == "unknown":
            node = _get(doc, path)
            if isinstance(node, dict):
                node[r.choice(["_meta", "zzz", "", "id", "kind"])] = self._weird()
                return kind, doc
        if kind == "deep":
            depth = r.choice([100, 1000, 100_000])
            inner = "[" * depth + "]" * depth if r.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
            return kind, _set(doc, path, _Raw(inner))
        if kind == "big":
            return kind, _set(doc, path, "y" * (LIMIT + r.randint(1, 4096)))
        if kind == "meta_int":
            node = _get(doc, path)
            if isinstance(node, dict):
                node["_meta"] = {"n": -(2**64)}
                return kind, doc
        return "type", _set(doc, path, self._weird())

    def mutate(self, doc: Any) -> tuple[str, bytes]:
        """A mutant of `doc` as bytes (no newline in it), and what was done."""
        r = self.rng
        kind, tree = self._tree(doc) if r.random() < 0.6 else ("none", doc)
        data = _dumps(tree)
        byte_kind = r.choice(["none", "none", "flip", "truncate", "utf8", "garbage", "empty", "dup"])
        if byte_kind == "flip" and data:
            buf = bytearray(data)
            for _ in range(r.randint(1, 8)):
                i = r.randrange(len(buf))
                buf[i] ^= 1 << r.randrange(8)
            data = bytes(buf)
        elif byte_kind == "truncate" and data:
            data = data[: r.randrange(len(data))]
        elif byte_kind == "utf8":
            quotes = [i for i, b in enumerate(data) if b == 0x22]
            at = r.choice(quotes) + 1 if quotes else 0
            data = data[:at] + r.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]) + data[at:]
        elif byte_kind == "garbage":
            data = bytes(r.randrange(256) for _ in range(r.randint(1, 64)))
        elif byte_kind == "empty":
            data = r.choice([b"", b" ", b"null", b"[]", b"{}", b"1", b'"x"'])
        elif byte_kind == "dup" and data.startswith(b"{") and len(data) > 2:
            data = data[:-1] + b"," + data[1:]  # every key twice
        data = data.replace(b"\n", b" ").replace(b"\r", b" ")
        return f"{kind}+{byte_kind}", data


class _Raw:
    """Pre-encoded JSON (nesting deeper than json.dumps can write)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _dumps(doc: Any) -> bytes:
    raws: list[str] = []

    def default(o: Any) -> Any:
        if isinstance(o, _Raw):
            raws.append(o.text)
            return f"\u0001RAW{len(raws) - 1}\u0001"
        raise TypeError(type(o))

    text = json.dumps(doc, default=default)
    for i, raw in enumerate(raws):
        text = text.replace(f'"\\u0001RAW{i}\\u0001"', raw)
    return text.encode()


# -- the daemon and the report ----------------------------------------------------------------


def fuzz_config(tmp_path: Path) -> dict[str, Any]:
    cfg = base_config(
        tmp_path,
        {"demo": demo_route()},
        default_route="demo",
        server={"max_body_bytes": LIMIT},
        daemon={"shutdown_grace_s": 1},
        ws={"max_frame_bytes": LIMIT, "max_messages_per_s": 1_000_000.0, "message_burst": 1_000_000},
        acp={"max_frame_bytes": LIMIT},
    )
    return cfg


class Report:
    def __init__(self, front: str) -> None:
        self.front = front
        self.bad: list[str] = []

    def fail(self, case: int, kind: str, data: bytes, why: str) -> None:
        self.bad.append(f"seed {SEED} {self.front} case {case} ({kind}): {why}; sent {data[:160]!r}")

    def check(self, d: Daemon) -> None:
        bad = self.bad
        shown = "\n".join(bad[:MAX_REPORTED])
        assert not bad, f"{len(bad)} of {BUDGET} mutants got a wrong answer:\n{shown}\n--- daemon log (tail):\n{d.log_text()[-4000:]}"
        assert d.proc.returncode is None, f"the daemon died: {d.log_text()[-4000:]}"
        text = d.log_text()
        assert "Traceback" not in text, text[text.index("Traceback") - 300 :][:5000]


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return clean_env


@asynccontextmanager
async def fuzz_daemon(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Daemon]:
    async with start_daemon(bridge_exe, tmp_path, env, fuzz_config(tmp_path)) as d:
        yield d


# -- HTTP fronts ------------------------------------------------------------------------------


def _msg(text: str = "hello", **more: Any) -> dict[str, Any]:
    return {"messageId": "fz-1", "role": "ROLE_USER", "parts": [{"text": text}], **more}


def _msg03(text: str = "hello") -> dict[str, Any]:
    return {"kind": "message", "messageId": "fz-1", "role": "user", "parts": [{"kind": "text", "text": text}]}


A2A_JSONRPC = [
    (V10, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": _msg(), "configuration": {"historyLength": 2}}}),
    (V10, {"jsonrpc": "2.0", "id": "a", "method": "GetTask", "params": {"id": "no-such-task", "historyLength": 1}}),
    (V10, {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {"pageSize": 5, "contextId": "c"}}),
    (V10, {"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": "no-such-task"}}),
    ({}, {"jsonrpc": "2.0", "id": 4, "method": "message/send", "params": {"message": _msg03()}}),
    ({}, {"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"id": "nope"}}),
    (V10, [{"jsonrpc": "2.0", "id": 6, "method": "GetTask", "params": {"id": "x"}}]),
]
A2A_HTTP = [
    ("/a2a/demo/message:send", V10, {"message": _msg(), "configuration": {"returnImmediately": False}}),
    ("/a2a/demo/tasks/nope:cancel", V10, {}),
    ("/a2a/demo/v1/message:send", {}, {"message": _msg03()}),
]
REST = [("/api/sessions", {}, {"route": "demo"}), ("/api/sessions", {}, {"route": "demo", "intent": "x"})]


async def _post_all(
    d: Daemon, front: str, seeds: list[tuple[str, dict[str, str], Any]], check: Callable[[httpx.Response], str | None],
    headers: dict[str, str] | None = None,
) -> Report:  # fmt: skip
    report = Report(front)
    mutator = Mutator(f"{SEED}-{front}")
    async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
        for case in range(BUDGET):
            path, extra, seed = mutator.rng.choice(seeds)
            kind, data = mutator.mutate(seed)
            hdrs = {"Content-Type": "application/json", **(headers or {}), **extra}
            try:
                r = await h.post(path, content=data, headers=hdrs)
            except httpx.HTTPError:
                # Once more on a fresh connection: a kept-alive one the daemon closed after
                # the previous answer is the client's race, not this mutant's answer.
                try:
                    async with httpx.AsyncClient(base_url=d.url, timeout=30) as fresh:
                        r = await fresh.post(path, content=data, headers=hdrs)
                except httpx.HTTPError as exc:
                    report.fail(case, kind, data, f"no answer: {exc!r}")
                    continue
            if r.status_code >= 500:
                report.fail(case, kind, data, f"HTTP {r.status_code}: {r.text[:200]}")
                continue
            why = check(r)
            if why:
                report.fail(case, kind, data, why)
    return report


def _jsonrpc_answer(r: httpx.Response) -> str | None:
    if r.status_code != 200:
        return None if r.status_code in (400, 401, 403, 404, 405, 413, 415, 422) else f"HTTP {r.status_code}"
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return None if "data:" in r.text else "an empty event stream"
    try:
        body = r.json()
    except ValueError:
        return f"HTTP 200 that is not JSON: {r.text[:200]}"
    bodies = body if isinstance(body, list) else [body]
    for b in bodies:
        if not (isinstance(b, dict) and b.get("jsonrpc") == "2.0" and ("result" in b or "error" in b)):
            return f"not a JSON-RPC response: {r.text[:200]}"
        if "error" in b and b["error"].get("code") == -32603:
            return f"internal error: {r.text[:300]}"
    return None


def _plain_answer(r: httpx.Response) -> str | None:
    if r.status_code >= 400:
        try:
            r.json()
        except ValueError:
            return f"HTTP {r.status_code} without a JSON error body: {r.text[:200]}"
    return None


async def test_fuzz_a2a_jsonrpc(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with fuzz_daemon(bridge_exe, tmp_path, env) as d:
            seeds = [("/a2a/demo", h, s) for h, s in A2A_JSONRPC]
            report = await _post_all(d, "a2a-jsonrpc", seeds, _jsonrpc_answer)
            report.check(d)
            await assert_serves_every_front(d, env)


async def test_fuzz_a2a_http_json_and_rest(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with fuzz_daemon(bridge_exe, tmp_path, env) as d:
            a2a = await _post_all(d, "a2a-http", A2A_HTTP, _plain_answer)
            rest = await _post_all(d, "rest", REST, _plain_answer)
            a2a.bad += rest.bad
            a2a.check(d)
            await assert_serves_every_front(d, env)


MCP_SEEDS = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "demo", "arguments": {"prompt": "hello"}}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 3, "method": "prompts/list", "params": {"cursor": None}},
    {"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": "nope", "arguments": {"a": "b"}}},
    {"jsonrpc": "2.0", "id": 5, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
    {"jsonrpc": "2.0", "id": 6, "method": "completion/complete",
     "params": {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}},
]  # fmt: skip


async def test_fuzz_mcp(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with fuzz_daemon(bridge_exe, tmp_path, env) as d:
            accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}  # fmt: skip
                r = await h.post("/mcp", json=init, headers=accept)
                assert r.status_code == 200, r.text
                session = {"Mcp-Session-Id": r.headers["mcp-session-id"]}
                r = await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**accept, **session})
                assert r.status_code == 202, r.text
            seeds = [("/mcp", {}, s) for s in MCP_SEEDS]
            report = await _post_all(d, "mcp", seeds, _mcp_answer, headers={**accept, **session})
            report.check(d)
            await assert_serves_every_front(d, env)


def _mcp_answer(r: httpx.Response) -> str | None:
    if r.status_code == 202:
        return None
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [ln.removeprefix("data:").strip() for ln in r.text.splitlines() if ln.startswith("data:")]
        answers = [json.loads(e) for e in events if e]
        final = [a for a in answers if "result" in a or "error" in a]
        if not final:
            return f"an event stream with no response: {r.text[:200]}"
        if any(a.get("error", {}).get("code") == -32603 for a in final):
            return f"internal error: {r.text[:300]}"
        return None
    return _jsonrpc_answer(r)


# -- /ws frames -----------------------------------------------------------------------------------


WS_CLIENT_CLOSE_CODES = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 4400, 4401, 4008}
WS_SEEDS = [
    {"event": "chat:send", "data": {"session_id": "SID", "message": "hello"}},
    {"event": "chat:send", "data": {"session_id": "SID", "message": [{"type": "text", "text": "hi"}]}},
    {"event": "session:subscribe", "data": {"session_id": "SID", "after_sequence": 1_000_000}},
    {"event": "session:unsubscribe", "data": {"session_id": "SID"}},
    {"event": "chat:stop", "data": {"session_id": "SID"}},
    {"event": "chat:send", "data": {"session_id": "SID", "message": "", "askuser_answer": {"tool_call_id": "t", "selections": {"0": [0]}}}},
]


async def test_fuzz_ws_frames(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with fuzz_daemon(bridge_exe, tmp_path, env) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
            seeds = [json.loads(json.dumps(s).replace("SID", sid)) for s in WS_SEEDS]
            report = Report("ws")
            mutator = Mutator(f"{SEED}-ws")
            ws = await RawWs.open(d)
            for case in range(BUDGET):
                kind, data = mutator.mutate(mutator.rng.choice(seeds))
                opcode = 2 if mutator.rng.random() < 0.1 else 1
                probe = f"probe-{case}"
                try:
                    await ws.send(data, opcode)
                    await ws.send(json.dumps({"event": "session:subscribe", "data": {"session_id": probe}}).encode())
                except trio.BrokenResourceError:
                    pass  # closed after an earlier frame: seen below as EOF or a close frame
                while True:
                    got = await ws.frame()
                    if got is None:
                        report.fail(case, kind, data, f"the connection dropped without a close frame (reset: {ws.reset})")
                        break
                    op, payload = got
                    if op == 8:
                        code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                        if code not in WS_CLIENT_CLOSE_CODES:
                            report.fail(case, kind, data, f"close {code} {payload[2:]!r}")
                        break
                    if op == 1 and probe.encode() in payload:
                        break
                if got is None or got[0] == 8:
                    await ws.stream.aclose()
                    ws = await RawWs.open(d)
            await ws.stream.aclose()
            report.check(d)
            await assert_serves_every_front(d, env)


# -- ACP lines ------------------------------------------------------------------------------------


class LinePeer:
    """Newline-delimited JSON-RPC by hand: any bytes out, lines in."""

    def __init__(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, buf: bytes = b"") -> None:
        self.receive, self.send, self.buf = receive, send, buf

    async def line(self) -> bytes | None:
        while b"\n" not in self.buf:
            try:
                chunk = await self.receive.receive_some(1 << 20)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    async def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        await self.send.send_all(json.dumps(msg).encode() + b"\n")
        while True:
            line = await self.line()
            assert line is not None, "EOF"
            got = json.loads(line)
            if got.get("id") == msg["id"] and "method" not in got:
                return got  # type: ignore[no-any-return]


ACP_SEEDS = [
    {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "SID", "prompt": [{"type": "text", "text": "hello"}]}},
    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "SID", "prompt": [
        {"type": "resource_link", "uri": "file:///x", "name": "x", "size": 10}]}},  # fmt: skip
    {"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
    {"jsonrpc": "2.0", "id": 4, "method": "session/set_config_option", "params": {"sessionId": "SID", "configId": "mode", "value": "ask"}},
    {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "SID"}},
    {"jsonrpc": "2.0", "id": 5, "method": "session/load", "params": {"sessionId": "SID", "cwd": "/", "mcpServers": []}},
    {"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}},
    {"jsonrpc": "2.0", "id": 7, "result": {"outcome": {"outcome": "cancelled"}}},
]


async def fuzz_acp_lines(peer: LinePeer, front: str, cwd: str) -> Report:
    await peer.call({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
    new = await peer.call({"jsonrpc": "2.0", "id": "new", "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
    sid = new["result"]["sessionId"]
    seeds = [json.loads(json.dumps(s).replace("SID", sid).replace('"/"', json.dumps(cwd))) for s in ACP_SEEDS]
    report = Report(front)
    mutator = Mutator(f"{SEED}-{front}")
    for case in range(BUDGET):
        kind, data = mutator.mutate(mutator.rng.choice(seeds))
        probe = f"probe-{case}"
        try:
            await peer.send.send_all(data + b"\n")
            await peer.send.send_all(json.dumps({"jsonrpc": "2.0", "id": probe, "method": "session/list", "params": {}}).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            report.fail(case, kind, data, f"the connection is gone: {exc!r}")
            return report
        while True:
            line = await peer.line()
            if line is None:
                report.fail(case, kind, data, "the connection dropped")
                return report
            try:
                got = json.loads(line)
            except ValueError:
                report.fail(case, kind, data, f"a line that is not JSON: {line[:200]!r}")
                continue
            if "method" in got and "id" in got:  # the bridge asks us (a permission): say no
                await peer.send.send_all(json.dumps({"jsonrpc": "2.0", "id": got["id"], "result": {"outcome": {"outcome": "cancelled"}}}).encode() + b"\n")
                continue
            error = got.get("error") if isinstance(got, dict) else None
            if isinstance(error, dict) and error.get("code") == -32603:
                report.fail(case, kind, data, f"internal error: {line[:300]!r}")
            if got.get("id") == probe:
                break
    return report


async def test_fuzz_acp_unix_socket_and_preamble(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with fuzz_daemon(bridge_exe, tmp_path, env) as d:
            assert d.acp_socket is not None
            # The preamble: every mutant gets one answer line ({"ok"} or {"error"}), never silence.
            pre = Report("acp-preamble")
            mutator = Mutator(f"{SEED}-acp-preamble")
            for case in range(max(BUDGET // 10, 10)):
                kind, data = mutator.mutate({"route": "demo"})
                stream = await trio.open_unix_socket(d.acp_socket)
                async with stream:
                    try:
                        await stream.send_all(data + b"\n")
                    except trio.BrokenResourceError:
                        pass  # refused before the whole line was read (over 4 KiB): the answer is waiting
                    line = await LinePeer(stream, stream).line()
                    if line is None:
                        pre.fail(case, kind, data, "closed without an answer")
                    else:
                        try:
                            answer = json.loads(line)
                        except ValueError:
                            answer = None
                        if not (isinstance(answer, dict) and ("ok" in answer or "error" in answer)):
                            pre.fail(case, kind, data, f"answered {line[:200]!r}")
            stream = await trio.open_unix_socket(d.acp_socket)
            async with stream:
                await stream.send_all(b'{"route": "demo"}\n')
                peer = LinePeer(stream, stream)
                assert json.loads(await peer.line() or b"{}").get("ok"), "no preamble ack"
                report = await fuzz_acp_lines(peer, "acp-socket", str(tmp_path))
            report.bad = pre.bad + report.bad
            report.check(d)
            await assert_serves_every_front(d, env)


async def test_fuzz_acp_stdio(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "stdio.toml"
    doc = fuzz_config(tmp_path)
    doc["daemon"]["acp_socket"] = False
    config.write_text(toml(doc))
    log = tmp_path / "stdio.log"
    with trio.fail_after(CEILING_S), log.open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [*bridge_exe, "acp", "demo", "--config", str(config), "--state-dir", str(tmp_path / "state")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
        )  # fmt: skip
        try:
            peer = LinePeer(proc.stdout, proc.stdin)  # type: ignore[arg-type]
            report = await fuzz_acp_lines(peer, "acp-stdio", str(tmp_path))
            where = f"\n--- agent-bridge acp stderr (tail):\n{log.read_text(errors='replace')[-4000:]}"
            assert not report.bad, f"{len(report.bad)} of {BUDGET} mutants got a wrong answer:\n" + "\n".join(report.bad[:MAX_REPORTED]) + where
            assert proc.returncode is None, where
            # Still a normal turn afterwards.
            new = await peer.call({"jsonrpc": "2.0", "id": "n2", "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}})
            prompt = {"sessionId": new["result"]["sessionId"], "prompt": [{"type": "text", "text": "alive"}]}
            done = await peer.call({"jsonrpc": "2.0", "id": "p2", "method": "session/prompt", "params": prompt})
            assert done.get("result", {}).get("stopReason") == "end_turn", done
            assert "Traceback" not in log.read_text(errors="replace"), where
        finally:
            with trio.CancelScope(shield=True):
                await proc.stdin.aclose()  # type: ignore[union-attr]
                with trio.move_on_after(10):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
