"""The MCP front under concurrency: every request gets exactly one response.

The real `agent-bridge serve`; clients share one `Mcp-Session-Id` and reuse JSON-RPC
ids (each counts from 1, as independent workers of one client do), beside the `mcp`
SDK's own client in a session of its own. The SDK's Streamable HTTP transport files
a request's response stream under `str(id)`, so a second request with an id still in
flight took the first one's place and one of the two was never answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.daemon_support import base_config, demo_route, start_daemon

pytestmark = pytest.mark.trio

WORKERS = 8
PER_WORKER = 150
_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": "2025-11-25"}


def _messages(r: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of one POST's answer, a JSON body or an SSE stream."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return [r.json()] if r.content else []


async def _open_session(h: httpx.AsyncClient) -> str:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    r = await h.post("/mcp", json=init, headers=_HEADERS)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    r = await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**_HEADERS, "mcp-session-id": sid})
    assert r.status_code == 202, r.text
    return sid


async def test_shared_session_with_reused_ids_answers_every_request(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    answered: dict[tuple[int, int], list[dict[str, Any]]] = {}
    with trio.fail_after(120):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            limits = httpx.Limits(max_connections=WORKERS * 2)
            async with httpx.AsyncClient(base_url=d.url, timeout=60, limits=limits) as h:
                sid = await _open_session(h)

                async def worker(w: int) -> None:
                    for i in range(1, PER_WORKER + 1):
                        # Odd workers send the id as a string: the SDK keys both as str(id).
                        rid: int | str = i if w % 2 == 0 else str(i)
                        method = "tools/list" if i % 3 else "prompts/list"
                        body = {"jsonrpc": "2.0", "id": rid, "method": method}
                        r = await h.post("/mcp", json=body, headers={**_HEADERS, "mcp-session-id": sid})
                        assert r.status_code == 200, r.text
                        answered[(w, i)] = [m for m in _messages(r) if "id" in m and ("result" in m or "error" in m)]

                async def sdk_client() -> None:
                    from mcp import Client

                    async with Client(d.url + "/mcp", mode="legacy", cache=None) as client:
                        for i in range(20):
                            result = await client.call_tool("demo", {"prompt": f"sdk {i}"})
                            assert not result.is_error, result
                            assert result.content[0].text == f"You said: sdk {i}", result

                async with trio.open_nursery() as nursery:
                    for w in range(WORKERS):
                        nursery.start_soon(worker, w)
                    nursery.start_soon(sdk_client)

    lost = [k for k, got in answered.items() if len(got) != 1]
    assert len(answered) == WORKERS * PER_WORKER and not lost, f"{len(lost)} requests without exactly one answer: {lost[:10]}"
    for (w, i), (reply,) in answered.items():
        assert reply["id"] == (i if w % 2 == 0 else str(i)) and "result" in reply, reply
