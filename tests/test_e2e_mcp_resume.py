"""A `tools/call` whose connection is cut mid-turn still gets its answer.

The real `agent-bridge serve`, the `mcp` SDK's client, and between them a TCP proxy in
this test that cuts the call's connection once a progress note has crossed it, as an
unlucky network would. The SDK's client resumes with `Last-Event-ID` (MCP 2025-11-25,
Transports: Streamable HTTP, "Resumability and Redelivery") and the session's own event
store (bridge/fronts/mcp/resume.py) replays what it missed. Another session's
`Last-Event-ID` replays none of it, and an id nobody keeps is refused with 410.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any

import httpx
import pytest
import trio

from tests.daemon_support import base_config, demo_route, start_daemon

pytestmark = pytest.mark.trio

_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": "2025-11-25"}


class CuttingProxy:
    """Forwards 127.0.0.1 connections to the daemon; cuts the first one whose answer
    carries a progress note, just after forwarding it. Notes each request's head."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cut = trio.Event()
        self.heads: list[bytes] = []

    async def serve(self, nursery: trio.Nursery) -> int:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
        return listeners[0].socket.getsockname()[1]

    async def _handle(self, client: trio.SocketStream) -> None:
        # A side that resets or closes ends the connection, as on a real network.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            async with client, await trio.open_tcp_stream("127.0.0.1", self.port) as daemon:
                async with trio.open_nursery() as nursery:

                    async def up() -> None:
                        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                            while data := await client.receive_some(65536):
                                self.heads.append(data.split(b"\r\n\r\n", 1)[0].lower())
                                await daemon.send_all(data)
                        nursery.cancel_scope.cancel()

                    async def down() -> None:
                        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                            while data := await daemon.receive_some(65536):
                                await client.send_all(data)
                                if not self.cut.is_set() and b"notifications/progress" in data:
                                    self.cut.set()
                                    break  # both sockets close: the call's stream is cut mid-turn
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(up)
                    nursery.start_soon(down)


async def test_a_cut_tool_call_resumes_to_its_answer_and_no_session_reads_anothers(
    bridge_exe: list[str], tmp_path: Any, clean_env: dict[str, str]
) -> None:
    from mcp import Client

    config = base_config(tmp_path, {"slow": demo_route(chunk_delay_s=0, slow_duration_s=1.5)}, mcp={"progress_interval_s": 0.05})
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, trio.open_nursery() as nursery:
            proxy = CuttingProxy(int(d.url.rsplit(":", 1)[1]))
            port = await proxy.serve(nursery)
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", cache=None) as client:
                result = await client.call_tool("slow", {"prompt": "slow: and long"}, progress_callback=on_progress)
            assert proxy.cut.is_set()
            assert not result.is_error, result
            text = result.content[0].text
            assert text.startswith("tick 1. tick 2.") and "tick 15." in text, text  # the whole reply
            assert result.structured_content["stop_reason"] == "end_turn"
            assert any(b"last-event-id" in head for head in proxy.heads), proxy.heads  # it resumed
            assert progress == sorted(progress) and len(progress) >= 2, progress
            nursery.cancel_scope.cancel()

            # Another session: an id of that call's stream is not its to read.
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                sessions = []
                for _ in range(2):
                    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
                    r = await h.post("/mcp", json=init, headers=_HEADERS)
                    sid = r.headers["mcp-session-id"]
                    r = await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**_HEADERS, "mcp-session-id": sid})
                    assert r.status_code == 202, r.text
                    sessions.append(sid)
                a, b = sessions
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {"prompt": "tool: secret of a"}}}
                r = await h.post("/mcp", json=call, headers={**_HEADERS, "mcp-session-id": a})
                ids = [line[3:].strip() for line in r.text.splitlines() if line.startswith("id:")]
                assert "secret of a" in r.text and ids, r.text
                get = {**_HEADERS, "accept": "text/event-stream"}
                r = await h.get("/mcp", headers={**get, "mcp-session-id": b, "last-event-id": ids[-1]})
                assert r.status_code == 410 and "cannot resume" in r.text, r.text
                async with h.stream("GET", "/mcp", headers={**get, "mcp-session-id": b, "last-event-id": "1"}) as resp:
                    assert resp.status_code == 200
                    seen = b""
                    with trio.move_on_after(2):  # b's own stream after its event 1: its initialize answer at most
                        async for chunk in resp.aiter_raw():
                            seen += chunk
                assert b"secret" not in seen, seen
                # a's own first id replays a's call (the answer included) on a's session.
                async with h.stream("GET", "/mcp", headers={**get, "mcp-session-id": a, "last-event-id": ids[0]}) as resp:
                    assert resp.status_code == 200
                    seen = b""
                    async for chunk in resp.aiter_raw():
                        seen += chunk
                        if b"secret of a" in seen:
                            break
                assert json.dumps("You said: secret of a")[1:-1].encode() in seen or b"secret of a" in seen
