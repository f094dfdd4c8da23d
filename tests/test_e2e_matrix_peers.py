"""End to end: each third-party back row of the pair matrix (tests/matrix/peer_rows.py)
starts its peer, and one daemon with all their routes answers `hello there` through
each, over the A2A front (the matrix itself checks every kind)."""

from __future__ import annotations

import tomllib
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import trio

from daemon_support import base_config, start_daemon
from tests.matrix.peer_rows import PEER_ROWS


async def _hello(url: str, route: str) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": f"hello-{route}", "role": "ROLE_USER", "parts": [{"text": "hello there"}]}}}  # fmt: skip
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as h:
        r = await h.post(f"/a2a/{route}", json=body, headers={"A2A-Version": "1.0"})
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", (route, task)
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


async def test_every_peer_row_starts_and_answers(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with AsyncExitStack() as stack:
            routes = {row.name: tomllib.loads(await stack.enter_async_context(row.start(tmp_path))) for row in PEER_ROWS}
            d = await stack.enter_async_context(start_daemon(bridge_exe, tmp_path, clean_env, base_config(tmp_path, routes)))
            answers: dict[str, str] = {}

            async def ask(route: str) -> None:
                answers[route] = await _hello(d.url, route)

            async with trio.open_nursery() as nursery:
                for name in routes:
                    nursery.start_soon(ask, name)
    assert answers == dict.fromkeys(routes, "You said: hello there"), answers
