"""The client side of a chat event stream session, sans-I/O (for the chat back).

`ChatFollower` follows one remote chat session across turns and reconnects:

- `feed(frame)` takes one `{"event", "data"}` frame (Blade `api/chat-flow.md`, server events) and returns
  its canonical events through `ChatReader`, exactly once: a frame whose `sequence`
  is not past the last one seen is a replay of what we had (a resume after a
  dropped socket, blade-agent-kit 2610.0.4) and is skipped; frames of other sessions are skipped too.
- It knows whether the remote run is `paused`: Blade ends a run with
  `chat:end(status:"completed")` while an AskUserQuestion waits (Blade `api/chat-flow.md`, AskUserQuestion); the bridge's
  own `/ws` keeps the run open instead. Either way the canonical turn stays open.
- `sent(answered)` forgets a question once its answer is sent (a new prompt forgets
  every open one), so the run's next `chat:end` ends the turn even if the server
  never reports the question's result.

Outgoing payloads: `send_message` (a prompt as `chat:send`, Blade `api/chat-flow.md`, `chat:send`, with mode, model,
headless and output schema when asked), `send_answer` (`askuser_answer`, Blade `api/chat-flow.md`, AskUserQuestion),
`subscribe` (`after_sequence` to resume), `stop`. `message_of` converts canonical
content to chat message items (ACP `ContentBlock` ↔ Blade `chat:send` message items); `answer_from_text` reads a typed reply to a
question that was shown as text (Blade AskUserQuestion ↔ ACP `session/request_permission`, last resort).
"""

from __future__ import annotations

import base64
import posixpath
from typing import Any
from urllib.parse import urlparse

import msgspec

from bridge.codecs import safejson
from bridge.codecs.numbers import small_int
from bridge.codecs.chat_reader import ChatReader, askuser_answer
from bridge.core import events as ev
from bridge.core.content import (
    AudioContent,
    ContentBlock,
    DataContent,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    data_text,
)
from bridge.schema.chat import (
    FileItem,
    ImageUrl,
    ImageUrlItem,
    MessageItem,
    SendMessage,
    SessionRef,
    Subscribe,
    TextItem,
)

__all__ = [
    "ChatFollower",
    "answer_from_text",
    "chat_frame",
    "message_of",
    "question_text",
    "send_answer",
    "send_message",
    "subscribe",
    "stop",
    "subscribed_sequence",
]

_enc = msgspec.json.Encoder()


class _PeekData(msgspec.Struct, gc=False):
    sequence: int | None = None
    session_id: str | None = None
    message: Any = None  # system:error's


class _Peek(msgspec.Struct, gc=False):
    event: str = ""
    data: _PeekData | None = None


_peek = safejson.Decoder(_Peek)


def chat_frame(event: str, data: bytes) -> bytes:
    """A Socket.IO event (name + raw JSON payload) as a chat frame `{"event", "data"}`."""
    return b'{"event":' + _enc.encode(event) + b',"data":' + (data or b"null") + b"}"


class ChatFollower:
    """One remote chat session, followed across turns (see the module docstring)."""

    __slots__ = ("session_id", "reader", "last_seq", "known", "paused", "run_seen")

    def __init__(self, session_id: str, *, last_seq: int | None = None) -> None:
        self.session_id = session_id
        self.reader = ChatReader()
        # The last sequence seen; `known` is False until we have a baseline (a new
        # session starts at 0; a session found again learns it from the server).
        self.last_seq = last_seq or 0
        self.known = last_seq is not None
        self.paused = False
        self.run_seen = False  # a frame of the current run arrived (for first-event deadlines)

    def start_turn(self, turn_id: str) -> None:
        self.reader.turn_id = turn_id

    def sent(self, answered: str | None = None) -> None:
        """A `chat:send` went out: an answer to `answered` resumes the run, a prompt starts
        a new one (and leaves any question still open behind); either way the next
        `chat:end` is its own."""
        if answered is not None:
            self.reader.answered(answered)
        else:
            for q in self.reader.open_questions():
                self.reader.answered(q.id)
        self.reader.ended = False
        self.paused = False
        self.run_seen = False

    def skip(self, frame: bytes | str) -> str | None:
        """A frame that came before this turn's `chat:send`: part of an earlier run, so
        only its place is kept. A `system:error` for us is returned (its message): the
        server refusing the subscription."""
        try:
            peek = _peek.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        data = peek.data or _PeekData()
        if data.session_id is not None and data.session_id != self.session_id:
            return None
        if data.sequence is not None and (not self.known or data.sequence > self.last_seq):
            self.last_seq, self.known = data.sequence, True
        if peek.event == "system:error" and data.sequence is None:
            return str(data.message or "the chat server reported an error")
        return None

    def learn(self, sequence: int | None) -> None:
        """The server says where the stream stands (a subscribe acknowledgement)."""
        if sequence is not None and (not self.known or sequence > self.last_seq):
            self.last_seq = sequence
        self.known = self.known or sequence is not None

    def feed(self, frame: bytes | str) -> list[ev.Event]:
        """The canonical events of one frame; [] for a replayed or foreign one. Raises
        ParseError/InvalidParams (bridge.errors) for a frame that is not a chat frame."""
        try:
            peek = _peek.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return self.reader.feed(frame)  # let the reader say what is wrong with it
        data = peek.data or _PeekData()
        if data.session_id is not None and data.session_id != self.session_id:
            return []
        seq = data.sequence
        if seq is not None and self.known and seq <= self.last_seq:
            return []
        events = self.reader.feed(frame)
        if seq is not None:
            self.last_seq, self.known = seq, True
        if peek.event == "chat:start":
            self.paused = False
            self.run_seen = True
        elif peek.event == "chat:end":
            # Completed with a question open: the loop returned, the run waits (Blade `api/chat-flow.md`, AskUserQuestion).
            self.paused = not self.reader.ended and bool(self.reader.open_questions())
        elif peek.event.startswith("turn:"):
            self.run_seen = True
        return events



# -- outgoing ---------------------------------------------------------------------------------


def _data_url(mime: str, data: str) -> str:
    return f"data:{mime};base64,{data}"


def _name(uri: str) -> str:
    if uri.startswith("attachment:"):
        return uri[len("attachment:") :]
    try:
        return posixpath.basename(urlparse(uri).path) or uri
    except ValueError:  # a peer's URI urlparse refuses ("http://[::1")
        return uri


def _is_json(b: TextContent) -> bool:
    """Structured data (an A2A data part, as `codecs.a2a` marks it): kept as its own item."""
    mark = (b.meta or {}).get("agentBridge")
    return isinstance(mark, dict) and mark.get("mediaType") == "application/json"


def message_of(prompt: list[ContentBlock]) -> str | list[MessageItem]:
    """A canonical prompt as a `chat:send` message (Blade `api/chat-flow.md`, `chat:send`; ACP `ContentBlock`): a string when it is all
    plain text, else items. Structured data (JSON) is a text item of its own; embedded
    files go as `file` items; links as their URI (no chat type for them); audio as a
    file (lossy)."""
    if all(isinstance(b, TextContent) and not _is_json(b) for b in prompt):
        return "".join(b.text for b in prompt)  # type: ignore[union-attr]
    items: list[MessageItem] = []
    for b in prompt:
        if isinstance(b, TextContent):
            items.append(TextItem(text=b.text))
        elif isinstance(b, ImageContent):
            items.append(ImageUrlItem(image_url=ImageUrl(url=_data_url(b.mime_type, b.data))))
        elif isinstance(b, AudioContent):
            items.append(FileItem(name="audio", data=b.data, mime_type=b.mime_type))
        elif isinstance(b, ResourceLink):
            items.append(TextItem(text=b.uri))
        elif isinstance(b, DataContent):
            items.append(TextItem(text=data_text(b)))  # the chat stream has no data item
        elif isinstance(b, EmbeddedResource):
            r = b.resource
            data = r.blob if r.blob is not None else base64.b64encode((r.text or "").encode()).decode()
            items.append(FileItem(name=_name(r.uri), data=data, mime_type=r.mime_type))
    return items


def send_message(
    session_id: str,
    prompt: list[ContentBlock],
    *,
    mode: str | None = None,
    model: str | None = None,
    headless: bool = False,
    output_schema: dict[str, Any] | None = None,
) -> SendMessage:
    return SendMessage(
        session_id=session_id,
        message=message_of(prompt),
        mode=mode,
        model=model,
        headless=headless or output_schema is not None,
        output_schema=output_schema,
    )


def send_answer(session_id: str, question: ev.Question, answered: ev.QuestionAnswered) -> SendMessage:
    """`chat:send {askuser_answer}` (Blade `api/chat-flow.md`, AskUserQuestion). The message is a readable summary, which
    Blade shows in its transcript; mode is not forced."""
    answer = askuser_answer(question, answered)
    labels = {o.id: o.label for o in question.options}
    shown = [labels.get(s, s) for s in answered.selected]
    if answered.text:
        shown.append(answered.text)
    if answered.values:
        shown += [f"{k}: {v}" for k, v in answered.values.items()]
    return SendMessage(session_id=session_id, message=", ".join(shown) or " ", askuser_answer=answer)


def subscribe(session_id: str, after: int | None) -> Subscribe:
    return Subscribe(session_id=session_id, after_sequence=after)


def stop(session_id: str) -> SessionRef:
    return SessionRef(session_id=session_id)


def subscribed_sequence(data: bytes | None) -> tuple[bool, int | None, str | None]:
    """A subscribe acknowledgement (`session:subscribed` data, or a Socket.IO ACK's first
    argument): (accepted, the sequence it reports, the refusal's message)."""
    if not data:
        return True, None, None
    try:
        value = safejson.decode(data)
    except msgspec.DecodeError:
        return True, None, None
    if value is False:
        return False, None, "the server refused the subscription"
    if not isinstance(value, dict):
        return True, None, None
    refused = value.get("error") or value.get("detail") or (value.get("message") if value.get("ok") is False else None)
    if refused or value.get("ok") is False:
        return False, None, str(refused or "the server refused the subscription")
    seq = value.get("sequence", value.get("last_sequence"))
    return True, seq if isinstance(seq, int) and not isinstance(seq, bool) else None, None


# -- questions shown as text (Blade AskUserQuestion ↔ ACP `session/request_permission`, last resort) ---


def question_text(q: ev.Question) -> str:
    """The question written into the chat, numbered so a reply can name an option."""
    lines = [f"{q.header}: {q.prompt}" if q.header else q.prompt]
    if q.kind == "form":
        props = (q.schema or {}).get("properties", {})
        for i, (_key, spec) in enumerate(props.items() if isinstance(props, dict) else ()):
            lines.append(f"  {i + 1}. {spec.get('description') or spec.get('title') or ''}".rstrip())
        lines.append("(Reply to answer.)")
        return "\n".join(lines) + "\n"
    for i, o in enumerate(q.options):
        lines.append(f"  {i + 1}. {o.label}" + (f" — {o.description}" if o.description else ""))
    lines.append("(Reply with an option's number or name, or your own answer.)")
    return "\n".join(lines) + "\n"


def answer_from_text(q: ev.Question, text: str) -> ev.QuestionAnswered:
    """A typed reply as the answer to `q`: option numbers or names (comma-separated for
    a multi-select), else free text (`custom`, Blade AskUserQuestion ↔ ACP `session/request_permission`)."""
    reply = text.strip()
    if q.kind != "form" and q.options:
        picked: list[str] = []
        for word in [w.strip() for w in reply.split(",")] if q.multi_select else [reply]:
            match = None
            n = small_int(word)
            if n is not None and 1 <= n <= len(q.options):
                match = q.options[n - 1].id
            else:
                match = next((o.id for o in q.options if o.label.casefold() == word.casefold()), None)
            if match is None:
                picked = []
                break
            picked.append(match)
        if picked:
            return ev.QuestionAnswered(question_id=q.id, selected=picked)
    if q.kind == "form":
        props = (q.schema or {}).get("properties", {})
        first = next(iter(props), None) if isinstance(props, dict) else None
        return ev.QuestionAnswered(question_id=q.id, values={first: reply} if first else {}, text=reply)
    return ev.QuestionAnswered(question_id=q.id, text=reply)
