"""End to end: an exception inside hypercorn's handling of one connection ends that
connection only (STYLE.md rule 17; bridge/fronts/http_guard.py).

The real `agent-bridge serve`, started through tests/peers/hypercorn_faults.py, which
plants faults in hypercorn's own per-connection code (its HTTP/1.1 protocol and its
WebSocket message buffer), below the ASGI boundary hypercorn guards itself. Each
faulty connection gets its protocol's error (500; close 1011) and is closed; a /ws
client streaming a run meanwhile sees its run to the end, new clients are served, and
the fault is logged at ERROR with its traceback (our bug, rule 10).

Synchronisation is on frames, answers and log lines, never on sleeps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from daemon_support import PEERS, Daemon, RawWs, base_config, demo_route, raw_ws, start_daemon, still_serves, until_log, ws_frame

CEILING_S = 60
FAULTY = [sys.executable, str(PEERS / "hypercorn_faults.py")]


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return clean_env


async def faulty_http_request(d: Daemon) -> bytes:
    """A request whose head makes hypercorn's HTTP/1.1 code raise; all that came back."""
    host, port = d.url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(f"GET /api/sessions HTTP/1.1\r\nHost: {host}:{port}\r\nX-Inject-Fault: 1\r\n\r\n".encode())
        data = b""
        try:
            while chunk := await stream.receive_some(65536):
                data += chunk
        except trio.BrokenResourceError:
            pass
    return data


async def test_a_fault_inside_hypercorn_ends_only_that_connection(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    routes = {"demo": demo_route(chunk_delay_s=0.002, slow_duration_s=3.0)}
    cfg = base_config(tmp_path, routes, default_route="demo", daemon={"shutdown_grace_s": 1})
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, cfg, wrapper=FAULTY) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=10) as h:
                sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as watcher:
                # A client in the middle of a streamed run while other connections fail.
                await watcher.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "slow: go"}}))
                while json.loads(await watcher.get_message())["event"] != "turn:patch":
                    pass

                answer = await faulty_http_request(d)
                assert answer.startswith(b"HTTP/1.1 500 "), answer

                stream, rest = await raw_ws(d.url)
                async with stream:
                    await stream.send_all(ws_frame(b'{"event": "inject-fault"}'))
                    frames = RawWs(stream, rest)
                    assert await frames.close_code() == 1011
                    await frames.end()

                await until_log(d, "failed inside the server (our bug)", 2)
                assert d.proc.returncode is None, d.log_text()[-4000:]
                while True:
                    frame = json.loads(await watcher.get_message())
                    if frame["event"] == "chat:end":
                        assert frame["data"]["status"] == "completed", frame
                        break

            log = d.log_text()
            assert "injected fault in hypercorn's HTTP/1.1 protocol" in log, log[-4000:]
            assert "injected fault in hypercorn's WebSocket message buffer" in log, log[-4000:]
            assert " ERROR " in log and "Traceback" in log, log[-4000:]
            await still_serves(d, log_from=len(log))  # and no traceback after ours
