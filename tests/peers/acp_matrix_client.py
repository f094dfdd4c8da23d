"""The pair matrix's ACP editor: the official Python SDK, every kind of one (front, back) pair.

    python acp_matrix_client.py OPTIONS_JSON BRIDGE_CMD...

OPTIONS_JSON: `{"cwd", "stderr", "kinds": [{"name", "prompt", "answer", "cancel"}]}`.
Each kind runs in a session of its own; the editor declares form elicitation, answers
a permission by option kind (never by index) and a form from its schema. Prints
`{kind: {"updates", "permissions", "elicitations", "result"}}` (tests/matrix/fold.py
reads it), or `{"crash": ...}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import acp
from acp import spawn_agent_process, text_block
from acp.schema import AllowedOutcome, ClientCapabilities, DeniedOutcome, ElicitationCapabilities, RequestPermissionResponse
from acp_sdk_client import Editor, _dump


def form_answer(schema: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The content for a form (MCP 2025-11-25 elicitation schema): the answer's labels in
    the enum fields (by `oneOf` title or `enum` value), its text in a free string field."""
    content: dict[str, Any] = {}
    wanted = list(answer.get("selected") or ([answer["label"]] if answer.get("label") else []))
    for key, prop in (schema.get("properties") or {}).items():
        items = prop.get("items") if prop.get("type") == "array" else prop
        titled = {o.get("title", o.get("const")): o.get("const") for o in items.get("oneOf") or items.get("anyOf") or []}
        values = titled or {v: v for v in items.get("enum") or ()}
        if values:
            picked = [values[w] for w in wanted if w in values]
            content[key] = picked if prop.get("type") == "array" else (picked[0] if picked else next(iter(values.values())))
        elif prop.get("type") == "string" and answer.get("text"):
            content[key] = answer["text"]
    return content


class MatrixEditor(Editor):
    answer: dict[str, Any] = {}

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> RequestPermissionResponse:
        self.report["permissions"].append({"toolCall": _dump(tool_call), "options": [_dump(o) for o in options]})
        self._poke()
        chosen = next((o for o in options if o.kind == self.answer.get("option_kind")), None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        asked = [w["msg"] for w in self.report["wire"] if w["dir"] == "in" and w["msg"].get("method") == "elicitation/create"]
        params = asked[-1]["params"] if asked else {}
        self.report["elicitations"].append(params)
        return {"action": "accept", "content": form_answer(params.get("requestedSchema") or {}, self.answer)}


async def run_kind(ed: MatrixEditor, kind: dict[str, Any]) -> dict[str, Any]:
    ed.report.update(updates=[], permissions=[], elicitations=[])
    ed.answer = kind.get("answer") or {}
    sid = (await ed.conn.new_session(cwd=ed.cwd, mcp_servers=[])).session_id
    call = asyncio.ensure_future(ed.conn.prompt(session_id=sid, prompt=[text_block(kind["prompt"])]))
    if kind.get("cancel"):
        await ed.wait_for(lambda: ed.updates_of(sid, "agent_message_chunk") or call.done(), what="the first chunk")
        await ed.conn.cancel(session_id=sid)
    try:
        result: Any = {"result": _dump(await call)}
    except acp.RequestError as exc:
        result = {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}
    return {"updates": ed.updates_of(sid), "permissions": ed.report["permissions"], "elicitations": ed.report["elicitations"], "result": result}


async def main() -> int:
    opts_json, *command = sys.argv[1:]
    opts = json.loads(opts_json)
    ed = MatrixEditor(opts)
    ed.report["elicitations"] = []
    out: dict[str, Any] = {}
    stderr = open(opts["stderr"], "ab")  # noqa: SIM115 - closed below
    try:
        async with spawn_agent_process(
            ed, command[0], *command[1:], env=dict(os.environ), cwd=ed.cwd,
            transport_kwargs={"stderr": stderr}, observers=[ed._observe],
            # agent-client-protocol 0.12 serves `elicitation/create` (ACP RFD "Elicitation",
            # still unstable in the schema) only with this flag; without it the SDK answers
            # the bridge's form with -32601 Method not found, even though we declare it.
            use_unstable_protocol=True,
        ) as (conn, _process):  # fmt: skip
            ed.conn = conn
            caps = ClientCapabilities(elicitation=ElicitationCapabilities(form={}))
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)
            for kind in opts["kinds"]:
                out[kind["name"]] = await asyncio.wait_for(run_kind(ed, kind), opts.get("timeout_s", 60))
    except Exception as exc:  # noqa: BLE001 - reported, the test decides
        out["crash"] = f"{type(exc).__name__}: {exc}"
    finally:
        stderr.close()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
