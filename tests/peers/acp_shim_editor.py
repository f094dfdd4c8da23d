"""An editor on the official ACP Python SDK that spawns `agent-bridge acp ROUTE --connect`.

    python acp_shim_editor.py SCENARIO OPTIONS_JSON BRIDGE_CMD...

Prints JSON lines on stdout as it goes (a test may kill it half-way):
- `first`: initialize, session/new, a finished prompt; prints {"session_id", "shim_pid"};
  then a "slow:" prompt, prints {"streaming": true} once chunks arrive, and waits to be killed.
- `load`: initialize, session/list, session/load of OPTIONS["session_id"], one more prompt;
  prints the report: the updates the SDK parsed, the results, any errors.
- `init`: initialize only; prints its result or error and how long it took.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import acp
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import Implementation


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(model, "model_dump") else model


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Editor:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append({"sessionId": session_id, "update": _dump(update)})
        self.changed.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")

    def on_connect(self, conn: Any) -> None:
        pass

    def chunks(self, session_id: str) -> int:
        return sum(1 for u in self.updates if u["sessionId"] == session_id and u["update"].get("sessionUpdate") == "agent_message_chunk")

    async def wait(self, pred: Any, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), max(0.01, deadline - time.monotonic()))


async def main() -> int:
    scenario, opts_json, *command = sys.argv[1:]
    opts = json.loads(opts_json)
    ed = Editor()
    cwd = opts.get("cwd") or os.getcwd()
    report: dict[str, Any] = {"results": {}}

    async def call(name: str, coro: Any) -> Any:
        try:
            result = await coro
        except RequestError as exc:
            report["results"][name] = {"error": {"code": exc.code, "message": str(exc)}}
            return None
        report["results"][name] = {"result": _dump(result)}
        return result

    t0 = time.monotonic()
    async with spawn_agent_process(ed, command[0], *command[1:], env=dict(os.environ), cwd=cwd) as (conn, process):
        init = conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_info=Implementation(name="shim-test-editor", version="1"))
        if scenario == "init":
            await call("initialize", init)
            report["elapsed_s"] = time.monotonic() - t0
            emit(report)
            return 0
        await asyncio.wait_for(init, 15)
        if scenario == "first":
            sid = (await conn.new_session(cwd=cwd, mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("hello there")])
            emit({"session_id": sid, "shim_pid": process.pid})
            before = ed.chunks(sid)
            asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("slow: x")]))
            await ed.wait(lambda: ed.chunks(sid) >= before + 2)
            emit({"streaming": True})
            await asyncio.sleep(3600)  # killed by the test
        elif scenario == "load":
            sid = opts["session_id"]
            await call("list", conn.list_sessions(cwd=cwd))
            await call("load", conn.load_session(cwd=cwd, session_id=sid, mcp_servers=[]))
            report["history"] = [u["update"] for u in ed.updates if u["sessionId"] == sid]
            await call("prompt", conn.prompt(session_id=sid, prompt=[text_block("once more")]))
            emit(report)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
