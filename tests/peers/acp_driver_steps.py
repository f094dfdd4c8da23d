"""An ACP editor on the official ACP Python SDK, driving `agent-bridge acp ROUTE` through a script.

    python acp_driver_steps.py OPTIONS_JSON BRIDGE_CMD...

OPTIONS_JSON: {"steps": [...], "elicitation": bool, "stderr": path, "timeout_s": s, "cwd": dir}.
Each step is one `session/prompt` in one session:
  {"name", "prompt", "cancel_after_chunks"?: n,
   "permission"?: "allow"|"reject"|"cancel"|"session_cancel"|<optionId>,
   "form"?: {...} | "decline"}
`cancel_after_chunks` sends `session/cancel` once n agent_message_chunks of the step
arrived. Questions are answered by the step's policy (default: allow, accept `{}`).

Prints one JSON report on stdout: `initialize` (the result), `steps` (per step:
`result` or `error`, its `chunks` [{messageId, content, meta}], `updates` (every
session/update of the step, as the SDK parsed and dumped it), `permissions`,
`elicitations`, `elapsed_s`, `cancel_to_answer_s`), `commands` (the last
available_commands_update), `sdk_log` (SDK warnings: expected empty), `crash`,
`bridge_returncode`. The A2A and chat back tests drive their routes with it.

The ACP SDK is asyncio-only, so it runs here, in its own process, not in the tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

import acp
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ClientCapabilities,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    RequestPermissionResponse,
)


def _dump(model: Any) -> Any:
    return None if model is None else model.model_dump(mode="json", by_alias=True, exclude_none=True)


class _Trap(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


class Editor:
    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = opts
        self.updates: list[dict[str, Any]] = []
        self.step: dict[str, Any] = {}
        self.policy: dict[str, Any] = {}
        self.changed = asyncio.Event()
        self.report: dict[str, Any] = {"steps": [], "sdk_log": [], "commands": None}
        self.conn: Any = None

    # -- acp.Client ------------------------------------------------------------------
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        u = _dump(update)
        self.updates.append(u)
        if u.get("sessionUpdate") == "available_commands_update":
            self.report["commands"] = u.get("availableCommands")
        self.changed.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        want = self.policy.get("permission", "allow")
        record: dict[str, Any] = {"toolCall": _dump(tool_call), "options": [_dump(o) for o in options]}
        self.step.setdefault("permissions", []).append(record)
        if want == "session_cancel":
            # The user pressed Stop while asked: ACP says send session/cancel, then
            # answer the pending request `cancelled`.
            await self.conn.cancel(session_id=session_id)
            response = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        elif want == "cancel":
            response = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        else:
            kind = {"allow": "allow_once", "reject": "reject_once"}.get(want)
            chosen = next((o for o in options if (o.kind == kind if kind else o.option_id == want)), options[0])
            response = RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))
        record["answer"] = _dump(response)
        return response

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        form = self.policy.get("form", {})
        self.step.setdefault("elicitations", []).append({"message": message, "mode": _dump(mode)})
        if form == "decline":
            return DeclineElicitationResponse(action="decline")
        return AcceptElicitationResponse(action="accept", content=form)

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    def on_connect(self, conn: Any) -> None:
        pass

    # -- helpers -----------------------------------------------------------------------
    def chunks_since(self, start: int) -> list[dict[str, Any]]:
        return [
            {"messageId": u.get("messageId"), "content": u.get("content"), "meta": u.get("_meta")}
            for u in self.updates[start:]
            if u.get("sessionUpdate") == "agent_message_chunk"
        ]

    async def wait_for(self, pred: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out waiting for chunks")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass


async def run(ed: Editor, conn: Any) -> None:
    opts = ed.opts
    ed.conn = conn
    caps = ClientCapabilities()
    if opts.get("elicitation"):
        caps = ClientCapabilities(elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()))
    init = await conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION,
        client_capabilities=caps,
        client_info=acp.schema.Implementation(name="e2e-steps-driver", version="1.0"),
    )
    ed.report["initialize"] = _dump(init)
    session = await conn.new_session(cwd=opts.get("cwd") or os.getcwd(), mcp_servers=[])
    sid = session.session_id
    for spec in opts["steps"]:
        ed.step = {"name": spec["name"]}
        ed.policy = spec
        ed.report["steps"].append(ed.step)
        start = len(ed.updates)
        t0 = time.monotonic()
        fut = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block(spec["prompt"])]))
        n = spec.get("cancel_after_chunks")
        if n:
            await ed.wait_for(lambda: len(ed.chunks_since(start)) >= n or fut.done(), spec.get("wait_s", 20))
            ed.step["chunks_before_cancel"] = len(ed.chunks_since(start))
            await conn.cancel(session_id=sid)
            t_cancel = time.monotonic()
        try:
            result = await fut
            ed.step["result"] = _dump(result)
        except RequestError as exc:
            ed.step["error"] = {"code": exc.code, "message": str(exc), "data": exc.data}
        if n:
            ed.step["cancel_to_answer_s"] = time.monotonic() - t_cancel
        ed.step["elapsed_s"] = time.monotonic() - t0
        ed.step["chunks"] = ed.chunks_since(start)
        ed.step["updates"] = ed.updates[start:]


async def main() -> int:
    opts_json, *command = sys.argv[1:]
    opts = json.loads(opts_json)
    ed = Editor(opts)
    logging.getLogger().addHandler(_Trap(ed.report["sdk_log"]))
    stderr = open(opts["stderr"], "ab") if opts.get("stderr") else None  # noqa: SIM115
    try:
        async with spawn_agent_process(
            ed, command[0], *command[1:], env=dict(os.environ), cwd=opts.get("cwd"),
            transport_kwargs={"stderr": stderr} if stderr else None,
            # elicitation/create is in the SDK's "unstable" method table (ACP schema 1.19).
            use_unstable_protocol=True,
        ) as (conn, process):
            await asyncio.wait_for(run(ed, conn), opts.get("timeout_s", 60))
        ed.report["bridge_returncode"] = process.returncode
    except Exception as exc:  # noqa: BLE001 - reported; the test decides
        ed.report["crash"] = f"{type(exc).__name__}: {exc}"
    finally:
        if stderr:
            stderr.close()
    json.dump(ed.report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
