"""What an A2A client and an MCP client were shown, folded into a protocol-free `Seen`.

A2A (a2a.proto `StreamResponse`): the reply is the task's artifacts; WORKING status
messages are progress, or, tagged `metadata.agentBridge.kind` (thought, subagent,
tool_call, plan), what the bridge carries of the kinds A2A has no part for;
INPUT_REQUIRED's message is the question. MCP: the `tools/call` result (MCP
2025-11-25 "Tools") and the elicitation forms it asked.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tests.matrix.fold import Tools, form_asked
from tests.matrix.kinds import Asked, Option, Seen

__all__ = ["fold_a2a", "fold_mcp"]

_STATES = {"TASK_STATE_COMPLETED": "end_turn", "TASK_STATE_REJECTED": "refusal", "TASK_STATE_CANCELED": "cancelled", "TASK_STATE_FAILED": "error"}


def _text(msg: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in msg.get("parts") or [])


def _data(msg: dict[str, Any]) -> dict[str, Any]:
    return next((p["data"] for p in msg.get("parts") or [] if isinstance(p.get("data"), dict)), {})


def _part(p: dict[str, Any], seen: dict[str, Any]) -> None:
    if "text" in p:
        seen["text"] += p["text"]
    elif "data" in p:
        seen["data"].append(p["data"])
    elif "raw" in p or "url" in p or "file" in p:
        f = p.get("file") or p
        uri = f.get("url") or f.get("uri")
        if uri:
            seen["files"].append(("link", uri))
        else:
            seen["files"].append(("image" if str(p.get("mediaType") or f.get("mimeType", "")).startswith("image/") else "file", p.get("mediaType") or f.get("mimeType", "")))


def fold_a2a(report: dict[str, Any]) -> Seen:
    acc: dict[str, Any] = {"text": "", "data": [], "files": []}
    seen = Seen(stop="?")  # type: ignore[arg-type]
    tools = Tools()
    children: dict[str, str] = {}
    asked: list[Asked] = []
    for e in report.get("events", []):
        if "artifactUpdate" in e:
            for p in e["artifactUpdate"]["artifact"].get("parts", []):
                _part(p, acc)
            continue
        if "message" in e:
            for p in e["message"].get("parts", []):
                _part(p, acc)
            continue
        u = e.get("statusUpdate") or e.get("task") or {}
        status = u.get("status") or {}
        state, msg = status.get("state"), status.get("message") or {}
        tag = (msg.get("metadata") or {}).get("agentBridge") or {}
        if state == "TASK_STATE_WORKING" and msg:
            kind = tag.get("kind")
            if kind == "thought":
                seen.thought += _text(msg)
            elif kind == "subagent":
                ref = tools.ref(tag.get("parentToolCallId")) or ""
                children[ref] = children.get(ref, "") + _text(msg)
            elif kind == "tool_call":
                t = _data(msg).get("toolCall", {})
                tools.update(t["id"], title=t.get("title"), kind=t.get("kind"), status=t.get("status"), text=t.get("content"), parent=tag.get("parentToolCallId"))
            elif kind == "plan":
                seen.plan = tuple((x["content"], x["status"]) for x in _data(msg).get("plan", []))
            else:
                seen.progress += _text(msg)
        elif state == "TASK_STATE_INPUT_REQUIRED":
            q = _data(msg)
            options = tuple(Option(o.get("id", ""), o.get("label", ""), o.get("kind")) for o in q.get("options") or [])
            asked.append(Asked(kind=q.get("kind", "choice"), prompt=_text(msg), options=options, multi_select=bool(q.get("multiSelect")),
                               allow_text=bool(q.get("allowText")), tool=tools.ref(q.get("toolCallId"))))  # fmt: skip
        elif state in _STATES:
            seen.stop = (msg.get("metadata") or {}).get("agentBridge", {}).get("stopReason") or (u.get("metadata") or {}).get("agentBridge", {}).get("stopReason") or _STATES[state]
            if state == "TASK_STATE_FAILED":
                seen.error = _text(msg)
    if "error" in report:
        seen.stop, seen.error = "error", json.dumps(report["error"])
    return msgspec.structs.replace(seen, text=acc["text"], data=tuple(acc["data"]), files=tuple(acc["files"]), tools=tools.seen(),
                                   asked=tuple(asked), children=children)  # fmt: skip


def fold_mcp(report: dict[str, Any]) -> Seen:
    """A `tools/call` result: text and its structured content, files, isError; forms it asked."""
    seen = Seen()
    tools = Tools()
    r = report.get("result") or {}
    structured = r.get("structuredContent")
    value = {k: v for k, v in structured.items() if k not in ("session_id", "stop_reason")} if isinstance(structured, dict) else structured
    if isinstance(value, dict) and set(value) == {"value"}:
        value = value["value"]
    data = (value,) if value not in (None, {}) else ()
    files: list[tuple[str, str]] = []
    for c in r.get("content") or []:
        if c.get("type") == "text":
            try:
                parsed = json.loads(c["text"])
            except ValueError:
                parsed = None
            if not (data and parsed == data[0]):
                seen.text += c["text"]
        elif c.get("type") == "image":
            files.append(("image", c.get("mimeType", "")))
        elif c.get("type") == "resource_link":
            files.append(("link", c.get("uri", "")))
    stop = (structured or {}).get("stop_reason") if isinstance(structured, dict) else None
    seen.stop = "cancelled" if report.get("cancelled") else stop or ("error" if r.get("isError") else "end_turn")
    if r.get("isError"):
        seen.stop, seen.error, seen.text = "error", seen.text, ""
    if "error" in report:
        seen.stop, seen.error = "error", str(report["error"])
    asked = tuple(form_asked(e, tools) for e in report.get("elicitations", []))
    return msgspec.structs.replace(seen, data=data, files=tuple(files), asked=asked)
