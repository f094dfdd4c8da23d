"""A2A ↔ canonical translation, sans-I/O (a2a.proto ↔ ACP schema).

- Content: `blocks_from_parts` / `parts_from_blocks` map a2a.proto `Part` ↔ ACP `ContentBlock` (text,
  raw and url parts ↔ ACP/MCP content blocks; a data part ↔ `DataContent`, its value kept
  as a value). a2a.proto's `Part.data` is a `google.protobuf.Value`, whose numbers are
  doubles: ProtoJSON writers (a2a-sdk's `MessageToDict`) print 42 as `42.0`. JSON has one
  number type (RFC 8259 §6), so `json_value` reads an integral double as the integer it
  is, and 42 stays 42 across a hop.
- `bridge.codecs.a2a_tracker.TaskTracker` turns what an agent says about one task
  into canonical events, with the helpers here.
- Questions (ACP `session/request_permission`; a2a.proto `TASK_STATE_INPUT_REQUIRED`): an INPUT_REQUIRED status message becomes a canonical
  `Question` (`question_for`), and the user's answer becomes the parts of the next
  message on the same task (`answer_parts`), bound to the question through the
  message metadata `{"agentBridge": {"inReplyTo": <status messageId>}}`.

  Option shapes read from a `data` part of the status message:
  `{"options": [{"id", "label", "kind"?, "description"?}], "multiSelect"?, "allowText"?}`
  → a choice (a permission when the options carry ACP kinds); answered with a text
  part (the labels) and a data part `{"selected": [ids], "text"?}`.
  `{"questions": [{"question", "header"?, "options": [{"label"}], "multiSelect"?}]}`
  (chat AskUserQuestion) → a choice (one question) or a form; answered with
  `{"selections": {"0": [option index]}, "custom": {"0": text}}` (Blade `api/chat-flow.md`, AskUserQuestion).
  Plain text → a form with one free-text field; answered with a text part.
- Stop reasons (a2a.proto `TaskState` ↔ ACP `StopReason`): completed → end_turn, canceled → cancelled, rejected →
  refusal; failed, input-required and auth-required are the back's to handle.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Literal, NamedTuple
from urllib.parse import urlparse

import msgspec
from msgspec import UNSET

from bridge.codecs.numbers import small_int
from bridge.codecs.option_kinds import infer_kind
from bridge.core.content import (
    AudioContent,
    ContentBlock,
    DataContent,
    EmbeddedResource,
    ImageContent,
    ResourceContents,
    ResourceLink,
    TextContent,
)
from bridge.core.events import Question, QuestionAnswered, QuestionOption, StopReason
from bridge.schema import a2a as s

__all__ = [
    "AskedQuestion",
    "META_KEY",
    "QUIET_STATES",
    "answer_from_text",
    "answer_parts",
    "auth_url",
    "block_from_part",
    "blocks_from_parts",
    "json_value",
    "message_text",
    "parts_from_blocks",
    "question_for",
    "question_text",
    "stop_reason",
    "user_message",
]

META_KEY = "agentBridge"
_json = msgspec.json.Encoder()
_STOPS = {
    s.TaskState.COMPLETED: StopReason.END_TURN,
    s.TaskState.CANCELED: StopReason.CANCELLED,
    s.TaskState.REJECTED: StopReason.REFUSAL,
}
# States whose status message is not chat: it is a question or an error, shown otherwise.
QUIET_STATES = frozenset({s.TaskState.INPUT_REQUIRED, s.TaskState.AUTH_REQUIRED, s.TaskState.FAILED})


def stop_reason(state: str) -> StopReason | None:
    return _STOPS.get(state)


# -- content (a2a.proto `Part` ↔ ACP `ContentBlock`) -----------------------------------------------


def block_from_part(p: s.Part) -> ContentBlock:
    md = p.metadata or {}
    uri = md.get("uri") if isinstance(md.get("uri"), str) else None
    if p.text is not None:
        if uri:
            return EmbeddedResource(resource=ResourceContents(uri=uri, text=p.text, mime_type=p.media_type))
        return TextContent(text=p.text)
    if p.raw is not None:
        mt = p.media_type or "application/octet-stream"
        if mt.startswith("image/"):
            return ImageContent(data=p.raw, mime_type=mt)
        if mt.startswith("audio/"):
            return AudioContent(data=p.raw, mime_type=mt)
        return EmbeddedResource(
            resource=ResourceContents(uri=uri or f"attachment:{p.filename or 'file'}", blob=p.raw, mime_type=p.media_type)
        )
    if p.url is not None:
        size = md.get("size")
        return ResourceLink(
            uri=p.url,
            name=p.filename or _basename(p.url) or p.url,
            mime_type=p.media_type,
            title=md.get("title") if isinstance(md.get("title"), str) else None,
            description=md.get("description") if isinstance(md.get("description"), str) else None,
            size=size if isinstance(size, int) else None,
        )
    if p.data is not UNSET:
        return DataContent(data=json_value(p.data), mime_type=p.media_type)
    return TextContent(text="")


_EXACT = 2**53  # every integer up to this is exact in a double (IEEE 754 binary64)


def json_value(value: Any) -> Any:
    """A peer's JSON value with each integral double (`42.0`, how ProtoJSON prints a
    `google.protobuf.Value` number) made the integer it stands for; depth is bounded by
    the decoder (bridge/codecs/safejson.py)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_EXACT <= value <= _EXACT else value
    if isinstance(value, dict):
        return {k: json_value(x) for k, x in value.items()}
    if isinstance(value, list):
        return [json_value(x) for x in value]
    return value


def blocks_from_parts(parts: list[s.Part]) -> list[ContentBlock]:
    return [block_from_part(p) for p in parts]


def parts_from_blocks(blocks: list[ContentBlock]) -> list[s.Part]:
    out: list[s.Part] = []
    for b in blocks:
        if isinstance(b, TextContent):
            out.append(s.Part(text=b.text))
        elif isinstance(b, DataContent):
            out.append(s.Part(data=b.data, media_type=b.mime_type))
        elif isinstance(b, (ImageContent, AudioContent)):
            out.append(s.Part(raw=b.data, media_type=b.mime_type))
        elif isinstance(b, ResourceLink):
            md = {k: val for k, val in (("title", b.title), ("description", b.description), ("size", b.size)) if val is not None}
            out.append(s.Part(url=b.uri, filename=b.name, media_type=b.mime_type, metadata=md or None))
        elif isinstance(b, EmbeddedResource):
            r = b.resource
            if r.blob is not None:
                name = _basename(r.uri) or None
                out.append(s.Part(raw=r.blob, filename=name, media_type=r.mime_type, metadata={"uri": r.uri}))
            else:
                out.append(s.Part(text=r.text or "", media_type=r.mime_type, metadata={"uri": r.uri}))
    return out


def user_message(
    blocks: list[ContentBlock],
    *,
    message_id: str,
    context_id: str | None = None,
    task_id: str | None = None,
    in_reply_to: str | None = None,
    extra_parts: list[s.Part] | None = None,
    client: dict[str, Any] | None = None,
) -> s.Message:
    """A user message; the first of a session carries no contextId (A2A `docs/topics/life-of-a-task.md`).

    `client` is the client's own `{"metadata": {...}, "extensions": [...]}` when it spoke
    A2A too (`TurnStarted.meta`): passed on as sent, except our own `agentBridge` key,
    which only we write (a client's, or an upstream bridge's, is not ours to pass on)."""
    parts = parts_from_blocks(blocks) + (extra_parts or [])
    given = (client or {}).get("metadata")
    meta: dict[str, Any] | None = {k: v for k, v in given.items() if k != META_KEY} if isinstance(given, dict) else None
    if in_reply_to:
        meta = {**(meta or {}), META_KEY: {"inReplyTo": in_reply_to}}
    ext = (client or {}).get("extensions")
    extensions = [x for x in ext if isinstance(x, str)] if isinstance(ext, list) else None
    return s.Message(
        message_id=message_id, role=s.ROLE_USER, parts=parts, context_id=context_id, task_id=task_id, metadata=meta,
        extensions=extensions or None,
    )  # fmt: skip


def message_text(msg: s.Message | None) -> str:
    if msg is None:
        return ""
    return "".join(p.text for p in msg.parts if p.text is not None).strip()


def _basename(url: str) -> str:
    """The last path segment of a peer's URL; "" for one urlparse refuses ("http://[::1")."""
    try:
        return posixpath.basename(urlparse(url).path)
    except ValueError:
        return ""


# -- questions (a2a.proto `TASK_STATE_INPUT_REQUIRED` ↔ ACP `session/request_permission`) ----------

Shape = Literal["options", "questions", "text"]


class AskedQuestion(NamedTuple):
    """A canonical question and what is needed to answer it on its A2A task."""

    question: Question
    task_id: str
    message_id: str  # the status message that asked it (the answer is bound to it)
    shape: Shape
    items: list[dict[str, Any]]  # the "questions" entries, for the "questions" shape


_KINDS = {"allow_once", "allow_always", "reject_once", "reject_always"}


def _data_parts(msg: s.Message | None) -> list[dict[str, Any]]:
    return [p.data for p in (msg.parts if msg else ()) if p.data is not UNSET and isinstance(p.data, dict)]


def question_for(status: s.TaskStatus, task_id: str, *, seq: int = 0) -> AskedQuestion:
    msg = status.message
    mid = msg.message_id if msg else ""
    qid = f"a2a-{task_id}-{mid or seq}"
    text = message_text(msg)
    for data in _data_parts(msg):
        opts = data.get("options")
        if isinstance(opts, list) and opts:
            options: list[QuestionOption] = []
            explicit = False
            for i, o in enumerate(opts):
                o = o if isinstance(o, dict) else {"label": str(o)}
                oid = str(o.get("id") or o.get("value") or o.get("label") or i)
                label = str(o.get("label") or o.get("name") or oid)
                kind = o.get("kind") if o.get("kind") in _KINDS else None
                explicit = explicit or kind is not None
                desc = o.get("description") if isinstance(o.get("description"), str) else None
                kind = kind or infer_kind(label, desc) or infer_kind(oid)  # None: never claim an allow the words do not say
                options.append(QuestionOption(id=oid, label=label, kind=kind, description=desc))  # type: ignore[arg-type]
            q = Question(
                id=qid,
                kind="permission" if explicit else "choice",
                prompt=text or str(data.get("question") or "The agent asks you to choose."),
                options=options,
                multi_select=bool(data.get("multiSelect")),
                allow_text=bool(data.get("allowText")),
                header=data.get("header") if isinstance(data.get("header"), str) else None,
            )
            return AskedQuestion(q, task_id, mid, "options", [])
        items = data.get("questions")
        if isinstance(items, list) and items and all(isinstance(x, dict) for x in items):
            return AskedQuestion(_chat_question(qid, text, items), task_id, mid, "questions", items)
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "title": "Answer", "description": text or "The agent needs more input"}},
        "required": ["answer"],
    }
    q = Question(id=qid, kind="form", prompt=text or "The agent needs more input.", schema=schema)
    return AskedQuestion(q, task_id, mid, "text", [])


def _labels(item: dict[str, Any]) -> list[str]:
    return [str(o.get("label", o)) if isinstance(o, dict) else str(o) for o in item.get("options") or ()]


def _chat_question(qid: str, text: str, items: list[dict[str, Any]]) -> Question:
    if len(items) == 1:
        item = items[0]
        options = [QuestionOption(id=str(i), label=lab) for i, lab in enumerate(_labels(item))]
        return Question(
            id=qid,
            kind="choice",
            prompt=str(item.get("question") or text or "The agent asks you to choose."),
            header=item.get("header") if isinstance(item.get("header"), str) else None,
            options=options,
            multi_select=bool(item.get("multiSelect")),
            allow_text=True,
        )
    props: dict[str, Any] = {}
    for i, item in enumerate(items):
        title = str(item.get("header") or item.get("question") or f"Question {i + 1}")
        choices = [{"const": str(j), "title": lab} for j, lab in enumerate(_labels(item))]
        if item.get("multiSelect"):
            props[f"q{i}"] = {"type": "array", "title": title, "description": item.get("question"), "items": {"anyOf": choices}}
        else:
            props[f"q{i}"] = {"type": "string", "title": title, "description": item.get("question"), "oneOf": choices}
        props[f"q{i}_custom"] = {"type": "string", "title": f"{title}: other"}
    return Question(id=qid, kind="form", prompt=text or "The agent has questions.", schema={"type": "object", "properties": props})


def question_text(asked: AskedQuestion) -> str:
    """The question as plain text, for a front that cannot ask (the next prompt answers)."""
    q = asked.question
    lines = [q.prompt]
    if asked.shape == "questions" and len(asked.items) > 1:
        for i, item in enumerate(asked.items):
            lines.append(f"{i + 1}. {item.get('question') or item.get('header') or ''}")
            lines += [f"   - {lab}" for lab in _labels(item)]
    elif q.options:
        lines += [f"{i + 1}. {o.label}" for i, o in enumerate(q.options)]
    return "\n".join(lines) + "\n"


def answer_parts(asked: AskedQuestion, answer: QuestionAnswered) -> list[s.Part]:
    """The user's answer as the parts of the next message on the task."""
    q = asked.question
    if asked.shape == "options":
        labels = [o.label for o in q.options if o.id in answer.selected]
        text = ", ".join(labels + ([answer.text] if answer.text else []))
        data: dict[str, Any] = {"selected": list(answer.selected)}
        if answer.text:
            data["text"] = answer.text
        return [s.Part(text=text), s.Part(data=data)]
    if asked.shape == "questions":
        selections: dict[str, list[int]] = {}
        custom: dict[str, str] = {}
        shown: list[str] = []
        if len(asked.items) == 1:
            idx = [n for n in (small_int(x) for x in answer.selected) if n is not None]
            if idx:
                selections["0"] = idx
            if answer.text:
                custom["0"] = answer.text
            labels = _labels(asked.items[0])
            shown = [labels[i] for i in idx if i < len(labels)] + ([answer.text] if answer.text else [])
        else:
            values = answer.values or {}
            for i, item in enumerate(asked.items):
                raw = values.get(f"q{i}")
                picks = raw if isinstance(raw, list) else [raw] if raw is not None else []
                idx = [n for n in (small_int(str(x)) for x in picks) if n is not None]
                if idx:
                    selections[str(i)] = idx
                other = values.get(f"q{i}_custom")
                if isinstance(other, str) and other:
                    custom[str(i)] = other
                labels = _labels(item)
                shown.append("; ".join([labels[j] for j in idx if j < len(labels)] + ([other] if isinstance(other, str) and other else [])))
        return [s.Part(text=" | ".join(x for x in shown if x)), s.Part(data={"selections": selections, "custom": custom})]
    text = answer.text
    if text is None and answer.values:
        got = answer.values.get("answer")
        text = got if isinstance(got, str) else _json.encode(answer.values).decode()
    return [s.Part(text=text or "")]


def answer_from_text(asked: AskedQuestion, text: str) -> QuestionAnswered:
    """A typed reply to a question shown as text: an option's number or label selects it."""
    q = asked.question
    t = text.strip()
    if q.options and asked.shape != "questions" or (asked.shape == "questions" and len(asked.items) == 1):
        for i, o in enumerate(q.options):
            if t == str(i + 1) or t.lower() == o.label.lower() or t == o.id:
                return QuestionAnswered(question_id=q.id, selected=[o.id])
    return QuestionAnswered(question_id=q.id, text=text)


def auth_url(status: s.TaskStatus) -> str | None:
    """Where an AUTH_REQUIRED agent sends the user: a url part, else a URL in its text."""
    msg = status.message
    for p in msg.parts if msg else ():
        if p.url:
            return p.url
    m = re.search(r"https?://\S+", message_text(msg))
    return m.group(0).rstrip(".,;)") if m else None
