"""Fault injection against the real `agent-bridge serve` (issue 13, "How it is checked").

One client's fault must never reach the daemon or another client. Each test injects
faults the way a hostile or merely unlucky peer would, then checks that the daemon
still serves a normal turn on every front (`assert_serves_every_front`: A2A JSON-RPC,
/ws + REST history, MCP through the `mcp` SDK, ACP through the ACP SDK and
`agent-bridge acp --connect`) and that it logged no traceback (our bug, STYLE.md
rule 10):

- many /ws watchers reset (SO_LINGER 0, no close frame) mid-stream, concurrently;
- clients that never read (/ws and A2A SSE), then a stop that must stay bounded;
- slowloris HTTP connections (headers one byte at a time, bodies never finished);
- ACP agents killed, frozen (SIGSTOP) and flooding (many lines, oversized lines,
  a line that never ends): tests/peers/acp_agent_sdk.py (the official SDK) and
  tests/peers/acp_agent_rude.py (raw, to break framing on purpose);
- `kill -9` of the daemon mid-turn, then a restart: no finished turn lost.

Synchronisation is on events (a frame seen, a chunk received); every test has a
`trio.fail_after` ceiling.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

import daemon_support
from daemon_support import PEERS, Daemon, assert_serves_every_front, base_config, demo_route, start_daemon, until_log, ws_frame

CEILING_S = 90
SDK_AGENT = [sys.executable, str(PEERS / "acp_agent_sdk.py")]
RUDE_AGENT = [sys.executable, str(PEERS / "acp_agent_rude.py")]


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return clean_env


def config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    routes = {
        "demo": demo_route(),
        # Streams a word every 2 ms for up to 30 s: long enough to be cut anywhere.
        "stream": demo_route(chunk_delay_s=0.002, slow_duration_s=30.0),
        "sdk": {"back": {"kind": "acp", "command": SDK_AGENT}, "turn_idle_timeout_s": 3, "cancel_grace_s": 1},
        "rude": {"back": {"kind": "acp", "command": RUDE_AGENT, "kill_grace_s": 1}, "turn_idle_timeout_s": 3, "cancel_grace_s": 1},
    }
    daemon = {"shutdown_grace_s": 1, **sections.pop("daemon", {})}
    return base_config(tmp_path, routes, daemon=daemon, default_route="demo", **sections)


def assert_no_traceback(d: Daemon) -> None:
    text = d.log_text()
    assert "Traceback" not in text, text[-6000:]


def host_port(d: Daemon) -> tuple[str, int]:
    host, port = d.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def rest_session(d: Daemon, route: str = "demo") -> str:
    async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        r = await h.post("/api/sessions", json={"route": route})
    assert r.status_code == 200, r.text
    return r.json()["session_id"]  # type: ignore[no-any-return]


# -- raw sockets: what a careless or hostile client does ---------------------------------------


async def raw_connect(d: Daemon, *, rcvbuf: int | None = None) -> trio.SocketStream:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # a small window: the daemon's writes block sooner
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect(host_port(d))
    return trio.SocketStream(sock)


async def reset(stream: trio.SocketStream) -> None:
    """Drop the connection the rude way: RST, no close frame, no FIN."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def raw_ws(d: Daemon, *, rcvbuf: int | None = None) -> tuple[trio.SocketStream, bytes]:
    """A WebSocket upgrade by hand; returns the stream and what came after the 101 head."""
    return await daemon_support.raw_ws(d.url, rcvbuf=rcvbuf)


async def ws_subscribe(stream: trio.SocketStream, sid: str, **data: Any) -> None:
    frame = {"event": "session:subscribe", "data": {"session_id": sid, **data}}
    await stream.send_all(ws_frame(json.dumps(frame).encode()))


async def read_until(stream: trio.SocketStream, needle: bytes, buf: bytes = b"") -> bytes:
    while needle not in buf:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed before {needle!r}: {buf[-500:]!r}"
        buf += chunk
    return buf



async def drain_to_eof(stream: trio.SocketStream) -> None:
    while True:
        try:
            chunk = await stream.receive_some(1 << 20)
        except trio.BrokenResourceError:
            return
        if not chunk:
            return


# -- 1. watchers reset mid-stream ------------------------------------------------------------


async def test_many_watchers_reset_mid_stream_concurrently(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    """Issue 13 finding 1: a /ws watcher dropping its TCP connection mid-stream killed the daemon.

    One client runs `bench:3000` turns back to back; rounds of watchers subscribe to the
    same session and reset their connection (no close frame), half of them right after
    the upgrade and the subscribe, half once a `turn:patch` reached them."""
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            sid = await rest_session(d)
            done = trio.Event()
            turns: list[str] = []

            async def streamer() -> None:
                async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", max_message_size=1 << 24) as ws:
                    while not done.is_set() or not turns:
                        send = {"event": "chat:send", "data": {"session_id": sid, "message": "bench:3000"}}
                        await ws.send_message(json.dumps(send))
                        while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
                            assert frame["event"] != "system:error", frame
                        turns.append(frame["data"]["status"])

            async def watcher(n: int) -> None:
                stream, buf = await raw_ws(d)
                await ws_subscribe(stream, sid)
                if n % 2:
                    await read_until(stream, b"turn:patch", buf)
                await reset(stream)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(streamer)
                for _ in range(8):  # rounds of concurrent resets while turns stream
                    async with trio.open_nursery() as watchers:
                        for n in range(25):
                            watchers.start_soon(watcher, n)
                done.set()
            # The streaming client never noticed: every one of its runs completed.
            assert turns and set(turns) == {"completed"}, turns
            await assert_serves_every_front(d, env)
            assert_no_traceback(d)


# -- 2. clients that never read ----------------------------------------------------------------


async def never_reading_sse(d: Daemon, text: str) -> tuple[trio.SocketStream, str]:
    """A2A SendStreamingMessage on a raw socket; reads the first event (the task) and no more."""
    stream = await raw_connect(d, rcvbuf=4096)
    host, port = host_port(d)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": f"m-{os.urandom(4).hex()}", "role": "ROLE_USER", "parts": [{"text": text}]}}}).encode()  # fmt: skip
    await stream.send_all(
        f"POST /a2a/demo HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    buf = await read_until(stream, b"\r\n\r\n")
    assert buf.split(b" ", 2)[1] == b"200", buf[:300]
    buf = await read_until(stream, b"\n\n", buf.partition(b"\r\n\r\n")[2])
    line = next(ln for ln in buf.split(b"\n") if ln.startswith(b"data:"))
    event = json.loads(line.removeprefix(b"data:"))
    result = event["result"]
    task = result.get("task") or result.get("statusUpdate") or result
    return stream, task.get("taskId") or task["id"]


async def test_clients_that_never_read_hold_nobody_and_not_the_stop(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 13 finding 5: a /ws client that stops reading held a graceful stop for 90-120 s.

    A /ws watcher and an A2A SSE client that never read while big turns stream: the
    turns finish for everyone else, the slow /ws client is dropped (its documented fate),
    every front serves; then SIGTERM with fresh never-readers attached still stops within
    shutdown_grace_s + graceful_timeout_s plus a small constant."""
    cfg = config(tmp_path, ws={"slow_client_timeout_s": 1, "queue_max_frames": 256})
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, cfg) as d:
            sid = await rest_session(d, "stream")
            lazy_ws, buf = await raw_ws(d, rcvbuf=4096)
            await ws_subscribe(lazy_ws, sid)
            await read_until(lazy_ws, b"session:subscribed", buf)
            lazy_sse, task_id = await never_reading_sse(d, "bench:100000")
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "slow: go"}}))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(until_log, d, "slow consumer")
                    while nursery.child_tasks:  # the reader keeps up meanwhile
                        frame = json.loads(await ws.get_message())
                        assert frame["event"] not in ("system:error", "chat:end"), frame
                # The /ws client that never read was dropped (close 4008), not buffered forever.
                await drain_to_eof(lazy_ws)
                await ws.send_message(json.dumps({"event": "chat:stop", "data": {"session_id": sid}}))
                while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
                    assert frame["event"] != "system:error", frame
                assert frame["data"]["status"] == "interrupted", frame
            # The A2A task ran to its end although its only stream never read a byte.
            async with httpx.AsyncClient(base_url=d.url, timeout=20, headers={"A2A-Version": "1.0"}) as h:
                # SubscribeToTask streams until the task ends (or answers at once, as an
                # error, if it already has): the wait is on the task itself.
                sub = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
                async with h.stream("POST", "/a2a/demo", json=sub, headers={"Accept": "text/event-stream"}) as s:
                    async for _ in s.aiter_bytes():
                        pass
                r = await h.post("/a2a/demo", json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": task_id}})
                assert r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
            # The /ws client that never read was dropped (close 4008), not buffered forever.
            await drain_to_eof(lazy_ws)
            await assert_serves_every_front(d, env)
            # A stop is bounded whatever the clients do.
            lazy_ws2, buf = await raw_ws(d, rcvbuf=4096)
            await ws_subscribe(lazy_ws2, sid)
            lazy_sse2, _ = await never_reading_sse(d, "bench:200000")
            assert_no_traceback(d)
            d.signal(signal.SIGTERM)
            # shutdown_grace_s 1 + graceful_timeout_s 1, plus a small constant
            assert await d.wait(timeout=12) == 0, d.log_text()[-4000:]
            for s in (lazy_sse, lazy_ws2, lazy_sse2):
                await s.aclose()


# -- 3. slowloris ---------------------------------------------------------------------------------


async def test_slowloris_connections_starve_nobody(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            host, port = host_port(d)
            held: list[trio.SocketStream] = []
            # Headers one byte at a time, round-robin over 120 connections, never finished.
            heads = [f"GET /api/sessions HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode() for _ in range(120)]
            for _ in range(120):
                held.append(await raw_connect(d))
            for i in range(max(len(h) for h in heads)):
                for stream, head in zip(held, heads):
                    if i < len(head):
                        await stream.send_all(head[i : i + 1])
            # Bodies announced and never finished, on every HTTP front.
            for path in ("/a2a/demo", "/api/sessions", "/mcp", "/a2a/demo/message:send"):
                for _ in range(20):
                    stream = await raw_connect(d)
                    await stream.send_all(
                        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                        f"Accept: application/json, text/event-stream\r\nA2A-Version: 1.0\r\n"
                        f"Content-Length: 100000\r\n\r\n{{\"jsonrpc\": ".encode()
                    )
                    held.append(stream)
            # WebSocket upgrades that never send a frame.
            for _ in range(20):
                stream, _ = await raw_ws(d)
                held.append(stream)
            await assert_serves_every_front(d, env)
            for stream in held:
                await reset(stream)
            await assert_serves_every_front(d, env, word="after")
            assert_no_traceback(d)


# -- 4. agents killed, frozen, flooding -----------------------------------------------------------


def pid_in(chunks: list[str]) -> int | None:
    for text in chunks:
        if text.startswith("pid="):
            return int(text.removeprefix("pid=").split()[0])
    return None


async def test_acp_agents_killed_and_frozen(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            async with d.acp("sdk") as acp:
                await acp.init()
                # Killed mid-turn: the turn fails, the daemon does not.
                killed = await acp.new(str(tmp_path))
                rid = await acp.prompt(killed, "pid slow")
                await acp.until(lambda: pid_in(acp.chunks(killed)) is not None)
                os.kill(pid_in(acp.chunks(killed)), signal.SIGKILL)  # type: ignore[arg-type]
                answer = await acp.response(rid)
                assert "error" in answer or answer["result"]["stopReason"] != "end_turn", answer
                await assert_serves_every_front(d, env, word="killed")

                # Frozen mid-turn (SIGSTOP): every other client is served meanwhile, and
                # the turn fails at the route's idle deadline instead of hanging.
                frozen = await acp.new(str(tmp_path))
                rid = await acp.prompt(frozen, "pid slow")
                await acp.until(lambda: pid_in(acp.chunks(frozen)) is not None)
                pid = pid_in(acp.chunks(frozen))
                assert pid is not None
                os.kill(pid, signal.SIGSTOP)
                try:
                    await assert_serves_every_front(d, env, word="frozen")
                    answer = await acp.response(rid, timeout=20)
                    assert "error" in answer, answer
                finally:
                    os.kill(pid, signal.SIGKILL)
                    os.kill(pid, signal.SIGCONT)
                # The route itself still works with a fresh agent.
                fresh = await acp.new(str(tmp_path))
                answer = await acp.call("session/prompt", {"sessionId": fresh, "prompt": [{"type": "text", "text": "text:2"}]})
                assert answer.get("result", {}).get("stopReason") == "end_turn", answer
            assert_no_traceback(d)


async def test_acp_agents_flooding_and_breaking_frames(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    """Issue 13 finding 6: an oversized line from an agent left the turn hanging, with no error."""
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            async with d.acp("rude") as acp:
                await acp.init()
                # A flood of small lines: relayed, and the others are served meanwhile.
                flood = await acp.new(str(tmp_path))
                rid = await acp.prompt(flood, "flood:50000")
                await acp.until(lambda: len(acp.chunks(flood)) > 100)
                await assert_serves_every_front(d, env, word="flood")
                answer = await acp.response(rid, timeout=30)
                assert answer.get("result", {}).get("stopReason") == "end_turn", answer

                # An answer line over max_frame_bytes (8 MiB): the turn fails, saying why.
                big = await acp.new(str(tmp_path))
                answer = await acp.call("session/prompt", {"sessionId": big, "prompt": [{"type": "text", "text": "bigline:9437184"}]}, timeout=30)
                assert "error" in answer, answer
                assert any(w in answer["error"]["message"].lower() for w in ("frame", "too large", "bytes")), answer

                # A line that never ends: the same clear failure, not an idle hang.
                endless = await acp.new(str(tmp_path))
                answer = await acp.call("session/prompt", {"sessionId": endless, "prompt": [{"type": "text", "text": "noline:20000000"}]}, timeout=30)
                assert "error" in answer, answer
                assert any(w in answer["error"]["message"].lower() for w in ("frame", "too large", "bytes")), answer

                # Lines no decoder may choke on (a 64-bit overflow once crashed the store's
                # flush and with it the daemon): each is the agent's garbage, the turn goes on.
                hostile = await acp.new(str(tmp_path))
                answer = await acp.call("session/prompt", {"sessionId": hostile, "prompt": [{"type": "text", "text": "hostile"}]}, timeout=30)
                assert answer.get("result", {}).get("stopReason") == "end_turn", answer
                assert acp.chunks(hostile)[-1:] == ["after"], acp.chunks(hostile)

                fresh = await acp.new(str(tmp_path))
                answer = await acp.call("session/prompt", {"sessionId": fresh, "prompt": [{"type": "text", "text": "hello"}]})
                assert answer.get("result", {}).get("stopReason") == "end_turn", answer
            await assert_serves_every_front(d, env, word="after")
            assert_no_traceback(d)


# -- 5. kill -9 mid-turn, then restart ------------------------------------------------------------


async def history(d: Daemon, sid: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        r = await h.get(f"/api/sessions/{sid}/messages")
    assert r.status_code == 200, r.text
    body = r.json()
    return body if isinstance(body, list) else body["messages"]  # type: ignore[no-any-return]


async def test_kill_9_mid_turn_then_restart_loses_no_finished_turn(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 13 finding 8: after kill -9, the cut turn must read as interrupted, every finished one intact."""
    cfg = config(tmp_path)
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, cfg, name="first") as d:
            sid = await rest_session(d, "stream")
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                for text in ("hello", "tool: read it", "plan: three steps"):
                    await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": text}}))
                    while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
                        pass
                    assert frame["data"]["status"] == "completed", frame
                before = await history(d, sid)
                await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "slow: cut me"}}))
                seen = 0
                while seen < 30:  # well into the turn, some of it flushed to the store
                    seen += json.loads(await ws.get_message())["event"] == "turn:patch"
                d.proc.kill()
                await d.wait()
        async with start_daemon(bridge_exe, tmp_path, env, cfg, name="second") as d:
            after = await history(d, sid)
            assert after[: len(before)] == before, "a finished turn changed across kill -9"
            cut = after[len(before) :]
            assert cut, "the cut turn's prompt is lost"
            assert all(m.get("status") != "streaming" for m in after), cut
            await assert_serves_every_front(d, env)
            # The restarted session carries on too.
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "again"}}))
                while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
                    pass
                assert frame["data"]["status"] == "completed", frame
            assert (await history(d, sid))[: len(before)] == before
            assert_no_traceback(d)
