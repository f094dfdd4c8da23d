"""What a front's client was shown, folded into a protocol-free `Seen`: ACP and the chat /ws.

Each fold reads what its driver recorded (the SDK's parsed updates, raw frames) and
keeps what a user of that protocol is shown; ids become order numbers (`tool#1`).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tests.matrix.kinds import Asked, Option, Seen, Tool

__all__ = ["Tools", "fold_acp", "fold_ws", "json_prefix"]


class Tools:
    """Tool calls by order of first appearance; the last value of each field wins."""

    def __init__(self) -> None:
        self.order: dict[str, dict[str, Any]] = {}

    def ref(self, tool_id: str | None) -> str | None:
        if tool_id is None:
            return None
        if tool_id not in self.order:
            return f"unknown:{tool_id}"
        return f"tool#{list(self.order).index(tool_id) + 1}"

    def asked_about(self, tool_id: str | None) -> str | None:
        """The tool call a permission is about; None for one the turn never showed (ACP's
        request must name a tool call, so the bridge names the question for one that is
        about none, e.g. an A2A agent's INPUT_REQUIRED)."""
        return self.ref(tool_id) if tool_id in self.order else None

    def update(self, tool_id: str, **fields: Any) -> None:
        t = self.order.setdefault(tool_id, {"title": "", "kind": "", "status": "", "locations": (), "diffs": (), "text": "", "parent": None})
        t.update({k: v for k, v in fields.items() if v is not None})

    def seen(self) -> tuple[Tool, ...]:
        return tuple(Tool(**{**t, "parent": self.ref(t["parent"])}) for t in self.order.values())


def json_prefix(text: str) -> tuple[Any, str] | None:
    """A JSON object or array at the start of `text` and the rest, if there is one."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        return None
    return value, stripped[end:].lstrip("\n")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = (obj.get("_meta") or obj.get("field_meta") or {}).get("agentBridge")
    return meta if isinstance(meta, dict) else {}


def _location(loc: dict[str, Any]) -> str:
    return f"{loc['path']}:{loc['line']}" if loc.get("line") is not None else loc["path"]


def form_asked(params: dict[str, Any], tools: Tools, *, tool_id: str | None = None) -> Asked:
    """An elicitation form (MCP 2025-11-25 "Elicitation"; ACP `elicitation/create`) as a question."""
    schema = params.get("requestedSchema") or {}
    options: list[Option] = []
    multi = text = False
    for prop in (schema.get("properties") or {}).values():
        items = prop.get("items") if prop.get("type") == "array" else prop
        listed = [(o.get("const"), o.get("title", o.get("const"))) for o in items.get("oneOf") or items.get("anyOf") or []]
        listed = listed or [(v, v) for v in items.get("enum") or ()]
        if listed:
            options += [Option(str(v), str(t)) for v, t in listed]
            multi = multi or prop.get("type") == "array"
        elif prop.get("type") == "string":
            text = True
    kind = "choice" if options else "form"
    return Asked(kind=kind, prompt=params.get("message", ""), options=tuple(options), multi_select=multi, allow_text=text,
                 tool=tools.ref(tool_id or params.get("toolCallId")))  # fmt: skip


def fold_acp(report: dict[str, Any]) -> Seen:
    """ACP `session/update`s (ACP schema `SessionUpdate`), permission requests, forms and the prompt's answer."""
    seen = Seen()
    tools = Tools()
    children: dict[str, str] = {}
    data: list[Any] = []
    files: list[tuple[str, str]] = []
    for u in report.get("updates", []):
        kind, meta = u.get("sessionUpdate"), _meta(u)
        parent = meta.get("parentToolCallId")
        c = u.get("content") if isinstance(u.get("content"), dict) else {}
        if kind == "agent_message_chunk":
            if c.get("type") == "text" and parent:
                ref = tools.ref(parent) or ""
                children[ref] = children.get(ref, "") + c["text"]
            elif c.get("type") == "text":
                seen.text += c["text"]
            elif c.get("type") == "image":
                files.append(("image", c.get("mimeType", "")))
            elif c.get("type") == "resource_link":
                files.append(("link", c.get("uri", "")))
            elif c.get("type") == "resource" and str(c["resource"].get("uri", "")).startswith("data:application/json"):
                data.append(json.loads(c["resource"]["text"]))
            else:
                files.append((c.get("type", "?"), json.dumps(c)[:80]))
        elif kind == "agent_thought_chunk":
            if meta.get("progress"):
                seen.progress += c.get("text", "")
            else:
                seen.thought += c.get("text", "")
        elif kind == "plan":
            seen.plan = tuple((e["content"], e["status"]) for e in u["entries"])
        elif kind in ("tool_call", "tool_call_update"):
            content = u.get("content")
            texts = "".join(x["content"].get("text", "") for x in content or [] if x.get("type") == "content")
            diffs = tuple((x["path"], x.get("oldText"), x["newText"]) for x in content or [] if x.get("type") == "diff")
            locs = tuple(_location(x) for x in u["locations"]) if u.get("locations") else None
            tools.update(u["toolCallId"], title=u.get("title"), kind=u.get("kind"), status=u.get("status"), locations=locs,
                         text=texts or None, diffs=diffs or None, parent=parent)  # fmt: skip
        elif kind == "usage_update":
            seen.usage = True
    asked = [
        Asked(kind="permission", prompt="", options=tuple(Option(o["optionId"], o["name"], o.get("kind")) for o in p["options"]),
              tool=tools.asked_about(p["toolCall"].get("toolCallId")))  # fmt: skip
        for p in report.get("permissions", [])
    ]
    asked += [form_asked(e, tools) for e in report.get("elicitations", [])]
    result = report.get("result") or {}
    if "error" in result:
        seen.stop, seen.error = "error", f"{result['error'].get('message')} {json.dumps(result['error'].get('data'))}"
    else:
        seen.stop = result.get("result", {}).get("stopReason", "?")
    return msgspec.structs.replace(seen, tools=tools.seen(), asked=tuple(asked), children=children, data=tuple(data), files=tuple(files))


_WS_STATUS = {"pending": "pending", "running": "in_progress", "done": "completed", "error": "failed", "awaiting_answer": "pending"}
_WS_STOP = {"completed": "end_turn", "max_tokens": "max_tokens", "max_turns": "max_turn_requests", "refusal": "refusal",
            "interrupted": "cancelled", "cancelled": "cancelled", "failed": "error", "error": "error"}  # fmt: skip


def fold_ws(frames: list[dict[str, Any]]) -> Seen:
    """The chat stream's server events (README, "Other fronts"), as a chat UI shows them."""
    seen = Seen()
    tools = Tools()
    parents: dict[str, str | None] = {}  # turn id → the fork's parent tool call id
    blocks: dict[tuple[str, int], dict[str, Any]] = {}
    asked: list[Asked] = []
    for f in frames:
        ev, d = f["event"], f.get("data") or {}
        if ev == "turn:start" and d.get("role") == "assistant":
            parents[d["turn_id"]] = d.get("parent_fork_tool_call_id")
        elif ev == "turn:end" and d.get("role") == "assistant" and d.get("usage"):
            seen.usage = True
        elif ev == "turn:patch":
            p, turn = d["data"], d["turn_id"]
            parent = parents.get(turn)
            if d["patch_type"] == "add_content":
                blocks[(turn, p["index"])] = {**p, "parent": parent}
            elif d["patch_type"] == "add_tool_call" and p.get("tool_name") == "AskUserQuestion":
                for q in json.loads(p.get("arguments") or "{}").get("questions", []):
                    options = tuple(Option(str(i), o["label"]) for i, o in enumerate(q.get("options") or []))
                    asked.append(Asked(kind="choice", prompt=q["question"], options=options, multi_select=bool(q.get("multiSelect")), allow_text=True))
            elif d["patch_type"] == "add_tool_call":
                tools.update(p["id"], title=p.get("display_name") or p.get("tool_name"), status=_WS_STATUS.get(p.get("status"), p.get("status")), parent=parent)
            elif d["patch_type"] == "set_tool_status" and p["tool_call_id"] in tools.order:
                tools.update(p["tool_call_id"], status=_WS_STATUS.get(p["status"], p["status"]))
            elif d["patch_type"] == "tool_result" and p["tool_call_id"] in tools.order:
                result = p.get("result")  # a text, or items: text, diff (path, old_text, new_text), terminal
                items = result if isinstance(result, list) else []
                text = result if isinstance(result, str) else "".join(str(i.get("text", "")) for i in items if i.get("type") == "text")
                diffs = tuple((i["path"], i.get("old_text"), i["new_text"]) for i in items if i.get("type") == "diff")
                tools.update(p["tool_call_id"], status=_WS_STATUS.get(p.get("status"), p.get("status")), text=text or None, diffs=diffs or None)
        elif ev == "system:error":
            seen.error = (seen.error or "") + str(d.get("message"))
        elif ev == "chat:end":
            seen.stop = _WS_STOP.get(d.get("finish_reason") or d.get("status"), d.get("finish_reason") or d.get("status"))
            if d.get("status") == "failed":
                seen.stop = "error"
            if isinstance(d.get("result"), dict) and "output" in d["result"]:
                seen.data += (d["result"]["output"],)
    children: dict[str, str] = {}
    data: list[Any] = list(seen.data)
    files: list[tuple[str, str]] = []
    for b in blocks.values():
        content, ref = b.get("content"), tools.ref(b["parent"])
        if b["type"] == "text":
            if ref:
                children[ref] = children.get(ref, "") + content
            else:
                seen.text += content
        elif b["type"] == "thinking":
            seen.thought += content
        elif b["type"] == "plan_status":
            seen.plan = tuple((e["content"], e["status"]) for e in content)
        elif b["type"] == "image_url":
            files.append(("image", content.removeprefix("data:").split(";")[0]))
        elif b["type"] == "resource_link":
            files.append(("link", content.get("uri", "")))
    return msgspec.structs.replace(seen, tools=tools.seen(), asked=tuple(asked), children=children, data=tuple(data), files=tuple(files))
