"""Pieces of the chat ↔ canonical translation that both directions share, sans-I/O.

- Content: `chat:send` message items ↔ canonical content blocks (ACP `ContentBlock` ↔ Blade `chat:send` message items).
- Tools: tool names ↔ canonical kinds, tool statuses both ways (ACP `ToolKind`, `ToolCallStatus`).
- AskUserQuestion: a canonical `Question` as the tool call's `{"questions": [...]}`
  arguments, a chat `askuser_answer` as a canonical answer and back (Blade `api/chat-flow.md`, AskUserQuestion).
- Headless output: `check_output_schema` and `headless_result`, from chat_schema.py
  (the final text checked against `output_schema`, its patterns on RE2, Blade `api/chat-flow.md`, headless).
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from typing import Any

import msgspec

from bridge.codecs import safejson
from bridge.codecs.chat_schema import check_output_schema, headless_result, result_of_check, stored_check
from bridge.codecs.option_kinds import infer_kind
from bridge.core.content import (
    AudioContent,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceContents,
    ResourceLink,
    TextContent,
)
from bridge.core.events import Question, QuestionAnswered, QuestionOption
from bridge.errors import InvalidParams
from bridge.schema.chat import AskUserAnswer, Block, FileItem, ImageUrlItem, MessageItem, TextItem

__all__ = [
    "ASK_TOOL",
    "KIND_BY_TOOL",
    "TOOL_BY_KIND",
    "answer_from_chat",
    "answer_to_chat",
    "ask_arguments",
    "ask_questions",
    "block_content",
    "blocks_of_prompt",
    "check_output_schema",
    "headless_result",
    "result_of_check",
    "stored_check",
    "message_to_content",
    "question_from_ask",
]

ASK_TOOL = "AskUserQuestion"

# Blade tool names → ACP `ToolKind`; "Agent" (a fork) reads back as `think` so a sub-agent round-trips.
KIND_BY_TOOL = {
    "Bash": "execute",
    "Read": "read",
    "Edit": "edit",
    "Write": "edit",
    "MultiEdit": "edit",
    "Glob": "search",
    "Grep": "search",
    "WebSearch": "search",
    "WebFetch": "fetch",
    "Agent": "think",
}
TOOL_BY_KIND = {
    "execute": "Bash",
    "read": "Read",
    "edit": "Edit",
    "search": "Grep",
    "fetch": "WebFetch",
    "think": "Agent",
}

_json = msgspec.json.Encoder()
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?,(.*)$", re.S)


# -- content --------------------------------------------------------------------------


def _b64(data: str, where: str) -> str:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidParams(f"{where}: not valid base64: {exc}") from exc
    return data


def message_to_content(message: str | list[MessageItem]) -> list[ContentBlock]:
    """A `chat:send` message as canonical content blocks (Blade `api/chat-flow.md`, `chat:send`; ACP `ContentBlock`)."""
    if isinstance(message, str):
        return [TextContent(text=message)] if message else []
    out: list[ContentBlock] = []
    for i, item in enumerate(message):
        where = f"$.message[{i}]"
        if isinstance(item, TextItem):
            out.append(TextContent(text=item.text))
        elif isinstance(item, ImageUrlItem):
            url = item.image_url.url
            m = _DATA_URL.match(url)
            if m is not None:
                if not (m.group(2) or "").endswith(";base64"):
                    raise InvalidParams(f"{where}.image_url.url: a data URL must be base64 (data:<mime>;base64,...)")
                out.append(
                    ImageContent(data=_b64(m.group(3), f"{where}.image_url.url"), mime_type=m.group(1) or "image/png")
                )
            elif url.startswith(("http://", "https://")):
                out.append(ResourceLink(uri=url, name=url.rstrip("/").rsplit("/", 1)[-1] or "image"))
            else:
                raise InvalidParams(f"{where}.image_url.url: expected a data: URL or an http(s) URL")
        elif isinstance(item, FileItem):
            mime = item.mime_type or mimetypes.guess_type(item.name)[0] or "application/octet-stream"
            blob = _b64(item.data, f"{where}.data")
            out.append(
                EmbeddedResource(resource=ResourceContents(uri=f"attachment:{item.name}", blob=blob, mime_type=mime))
            )
    return out


def _name_of(uri: str) -> str:
    if uri.startswith("attachment:"):
        return uri[len("attachment:") :]
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


def blocks_of_prompt(prompt: list[ContentBlock]) -> list[Block]:
    """The user turn's blocks: text as text, images as data URLs, files by name (Blade `api/types.md`)."""
    out: list[Block] = []
    for b in prompt:
        if isinstance(b, TextContent):
            out.append(Block(type="text", content=b.text))
        elif isinstance(b, ImageContent):
            out.append(Block(type="image_url", content=f"data:{b.mime_type};base64,{b.data}"))
        elif isinstance(b, AudioContent):
            out.append(Block(type="file", content={"name": "audio", "mime_type": b.mime_type, "data": b.data}))
        elif isinstance(b, ResourceLink):
            out.append(Block(type="resource_link", content={"uri": b.uri, "name": b.name}))
        elif isinstance(b, EmbeddedResource):
            r = b.resource
            body = {"name": _name_of(r.uri), "mime_type": r.mime_type}
            body.update({"text": r.text} if r.text is not None else {"data": r.blob})
            out.append(Block(type="file", content=body))
    return out


def block_content(kind: str, content: Any) -> ContentBlock | None:
    """A turn's `resource_link` or `file` block read back (the inverse of `blocks_of_prompt`); None if it is not one."""
    if not isinstance(content, dict):
        return None
    if kind == "resource_link" and isinstance(uri := content.get("uri"), str) and uri:
        name = content.get("name")
        return ResourceLink(uri=uri, name=name if isinstance(name, str) and name else _name_of(uri))
    if kind == "file" and isinstance(name := content.get("name"), str):
        mime = m if isinstance(m := content.get("mime_type"), str) else None
        text, data = content.get("text"), content.get("data")
        if isinstance(text, str) or isinstance(data, str):
            uri = f"attachment:{name}"
            body = ResourceContents(uri=uri, text=text, mime_type=mime) if isinstance(text, str) else ResourceContents(uri=uri, blob=data, mime_type=mime)
            return EmbeddedResource(resource=body)
    return None


# -- AskUserQuestion ------------------------------------------------------------------


def _choices(spec: dict[str, Any]) -> list[tuple[Any, str, str | None]]:
    """(value, label, description) of a form property's fixed choices, if any."""
    s = spec.get("items", {}) if spec.get("type") == "array" else spec
    if not isinstance(s, dict):
        return []
    if isinstance(s.get("enum"), list):
        return [(v, str(v), None) for v in s["enum"]]
    for key in ("oneOf", "anyOf"):
        if isinstance(s.get(key), list):
            return [
                (c["const"], str(c.get("title", c["const"])), c.get("description"))
                for c in s[key]
                if isinstance(c, dict) and "const" in c
            ]
    return []


def _form_fields(q: Question) -> list[tuple[str, dict[str, Any]]]:
    props = (q.schema or {}).get("properties", {})
    return [(k, v if isinstance(v, dict) else {}) for k, v in props.items()] if isinstance(props, dict) else []


def ask_questions(q: Question) -> list[dict[str, Any]]:
    """The AskUserQuestion `questions`: one per choice/permission question, one per form field."""
    if q.kind == "form":
        out = []
        for name, spec in _form_fields(q):
            options = [{"label": label, **({"description": d} if d else {})} for _, label, d in _choices(spec)]
            out.append(
                {
                    "question": spec.get("description") or spec.get("title") or name,
                    "header": spec.get("title") or name,
                    "options": options,
                    "multiSelect": spec.get("type") == "array",
                }
            )
        return out or [{"question": q.prompt, "header": q.header or "Question", "options": [], "multiSelect": False}]
    options = [{"label": o.label, **({"description": o.description} if o.description else {})} for o in q.options]
    header = q.header or ("Permission" if q.kind == "permission" else "Question")
    return [{"question": q.prompt, "header": header, "options": options, "multiSelect": q.multi_select}]


# Our own extension of the AskUserQuestion input: what the questions' labels cannot say
# (each option's id and permission kind, the question's kind and the tool call it is
# about), so a chat back on another agent-bridge reads the question exactly as it was
# asked. A Blade-style client ignores input fields it does not know.
EXTENSION = "agentBridge"
_OPTION_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


def ask_arguments(q: Question) -> str:
    args: dict[str, Any] = {"questions": ask_questions(q)}
    if q.kind != "form":
        ext: dict[str, Any] = {"kind": q.kind, "options": [{"id": o.id, **({"kind": o.kind} if o.kind else {})} for o in q.options]}
        if q.tool_call_id is not None:
            ext["toolCallId"] = q.tool_call_id
        if q.allow_text:
            ext["allowText"] = True
        args[EXTENSION] = ext
    return _json.encode(args).decode()


def _coerce(text: str, spec: dict[str, Any]) -> Any:
    if spec.get("type") in ("integer", "number", "boolean", "object", "array"):
        try:
            return safejson.decode(text)
        except msgspec.DecodeError:
            return text  # left for the form's own validation to reject
    return text


def answer_from_chat(q: Question, answer: AskUserAnswer) -> dict[str, Any]:
    """`askuser_answer` → the keyword arguments of `Session.answer`; InvalidParams if it does not fit."""
    questions = ask_questions(q)
    valid = {str(i) for i in range(len(questions))}
    for key in (*answer.selections, *answer.custom):
        if key not in valid:
            raise InvalidParams(f'no question {key!r}: this AskUserQuestion has {len(questions)} (keys "0"..)')
    picked: list[tuple[list[int], str | None]] = []
    for i, spec in enumerate(questions):
        sel = answer.selections.get(str(i)) or []
        text = answer.custom.get(str(i)) or None
        if not sel and text is None:
            raise InvalidParams(f"question {i}: choose an option (selections) or write an answer (custom)")
        n = len(spec["options"])
        for idx in sel:
            if not 0 <= idx < n:
                raise InvalidParams(f"question {i}: there is no option {idx} (options are 0..{n - 1})")
        if len(sel) > 1 and not spec["multiSelect"]:
            raise InvalidParams(f"question {i} takes one option, got {len(sel)}")
        picked.append((sel, text))
    fields = _form_fields(q)
    if q.kind == "form" and not fields:  # a form without fields: its one answer is text
        return {"values": {}, "text": picked[0][1]}
    if q.kind == "form":
        values: dict[str, Any] = {}
        for (name, spec), (sel, text) in zip(fields, picked, strict=True):
            choices = [c[0] for c in _choices(spec)]
            if sel:
                chosen = [choices[i] for i in sel]
                values[name] = chosen if spec.get("type") == "array" else chosen[0]
            else:
                values[name] = _coerce(text or "", spec)
        return {"values": values}
    sel, text = picked[0]
    return {"selected": [q.options[i].id for i in sel], "text": text}


def answer_to_chat(q: Question, answered: QuestionAnswered) -> dict[str, Any]:
    """A canonical answer as `{selections, custom}` (the tool result, or a chat back's answer)."""
    selections: dict[str, list[int]] = {}
    custom: dict[str, str] = {}
    if q.kind == "form" and answered.values is not None:
        for i, (name, spec) in enumerate(_form_fields(q)):
            if name not in answered.values:
                continue
            value = answered.values[name]
            choices = [c[0] for c in _choices(spec)]
            wanted = value if isinstance(value, list) and spec.get("type") == "array" else [value]
            if choices and all(v in choices for v in wanted):
                selections[str(i)] = [choices.index(v) for v in wanted]
            else:
                custom[str(i)] = value if isinstance(value, str) else _json.encode(value).decode()
    else:
        ids = [o.id for o in q.options]
        idx = [ids.index(s) for s in answered.selected if s in ids]
        if idx:
            selections["0"] = idx
        if answered.text:
            custom["0"] = answered.text
    return {"selections": selections, "custom": custom}


def question_from_ask(tool_call_id: str, arguments: str) -> Question:
    """An AskUserQuestion tool call read back as one canonical question (a chat back).

    One question becomes a `choice` whose option ids are the indexes ("0", "1", ...),
    free text allowed (`custom`), each option's kind inferred from its words (a
    `permission`, without free text, when those words tell an allow and a reject for
    every option of a single pick); several
    become a `form` with one field per question. Our own `agentBridge` extension (from
    another agent-bridge's `/ws`) gives back the question's kind, its options' ids and
    kinds and its tool call exactly.
    """
    try:
        parsed = safejson.decode(arguments or "{}")
    except msgspec.DecodeError:
        parsed = {}
    questions = [
        x for x in (parsed.get("questions") if isinstance(parsed, dict) else None) or [] if isinstance(x, dict)
    ]
    if len(questions) == 1:
        x = questions[0]
        options = [
            QuestionOption(
                id=str(i),
                label=str(o.get("label", i)),
                kind=infer_kind(str(o.get("label", "")), d if isinstance(d := o.get("description"), str) else None),  # type: ignore[arg-type]
                description=o.get("description"),
            )
            for i, o in enumerate(x.get("options") or [])
            if isinstance(o, dict)
        ]
        multi = bool(x.get("multiSelect"))
        permission = _is_permission(options, multi)
        q = Question(
            id=tool_call_id,
            kind="permission" if permission else "choice",
            prompt=str(x.get("question", "")),
            header=x.get("header"),
            options=options,
            multi_select=multi,
            allow_text=not permission,
        )
        ext = parsed.get(EXTENSION) if isinstance(parsed, dict) else None
        return _extended(q, ext) if isinstance(ext, dict) else q
    props: dict[str, Any] = {}
    for i, x in enumerate(questions):
        consts = [
            {"const": str(o.get("label")), "title": str(o.get("label"))}
            for o in x.get("options") or []
            if isinstance(o, dict)
        ]
        field: dict[str, Any] = {
            "title": x.get("header") or x.get("question", ""),
            "description": x.get("question", ""),
        }
        if x.get("multiSelect"):
            field.update(type="array", items={"anyOf": consts})
        else:
            field.update(type="string", **({"oneOf": consts} if consts else {}))
        props[str(i)] = field
    prompt = "\n".join(str(x.get("question", "")) for x in questions)
    return Question(id=tool_call_id, kind="form", prompt=prompt, schema={"type": "object", "properties": props})


def _is_permission(options: list[QuestionOption], multi: bool) -> bool:
    """Whether a Blade question's options read as a permission: one pick among options
    whose every kind the words tell, with an allow and a reject among them. Asked as an
    ACP `session/request_permission` (kinds kept, no free text), not as a choice."""
    kinds = {(o.kind or "").split("_")[0] for o in options}
    return not multi and bool(options) and all(o.kind for o in options) and {"allow", "reject"} <= kinds


def _extended(q: Question, ext: dict[str, Any]) -> Question:
    """A question read back with our extension: its own kind, option ids and kinds and
    tool call; the question as read from its labels if the extension does not fit them."""
    opts = ext.get("options")
    kind = ext.get("kind")
    if kind not in ("permission", "choice") or not isinstance(opts, list) or len(opts) != len(q.options):
        return q
    if not all(isinstance(o, dict) and isinstance(o.get("id"), str) and o.get("kind", None) in (None, *_OPTION_KINDS) for o in opts):
        return q
    if len({o["id"] for o in opts}) != len(opts):
        return q
    options = [QuestionOption(id=o["id"], label=x.label, kind=o.get("kind"), description=x.description) for o, x in zip(opts, q.options, strict=True)]
    tool = ext.get("toolCallId")
    return Question(
        id=q.id,
        kind=kind,
        prompt=q.prompt,
        header=q.header,
        options=options,
        multi_select=q.multi_select,
        allow_text=ext.get("allowText") is True,
        tool_call_id=tool if isinstance(tool, str) else None,
    )
