"""One turn of a session: the `TurnHandle` a back drives, and the checks on its answers.

A `Turn` is created by `Session.start_turn` and run by the session (bridge/session/live.py);
the back sees it as its `TurnHandle` (bridge/backs/base.py): `emit` an event, `flow()`
for backpressure, `ask` a question and wait for its answer, `cancel_requested`.

Questions: `ask` emits `QuestionAsked` and waits, bounded by the route's
`question_timeout_s`; no answer in time is a rejection, never an approval (DESIGN.md,
complaint 9). `check_answer` is what an answer must satisfy to be accepted for its
question (an option it offers, one of them unless multi-select, text only where the
question takes text); `rejection` is the answer given for the user when none came.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import trio

from bridge.config import Route
from bridge.core.content import ContentBlock
from bridge.core.identity import ANONYMOUS, Identity
from bridge.core.events import (
    CommandInfo,
    CommandsAvailable,
    Event,
    Question,
    QuestionAnswered,
    QuestionAsked,
    TurnEnded,
)
from bridge.core.turn import TurnInput, TurnMachine, TurnState
from bridge.errors import InvalidParams
from bridge.prompts.registry import Invocation
from bridge.store import SessionRecord, TurnRecord
from bridge.telemetry import OFF, TurnTrace

__all__ = ["Turn", "TurnHost", "check_answer", "new_id", "rejection"]


def new_id() -> str:
    return uuid.uuid4().hex


class TurnHost(Protocol):
    """What a turn needs of its session (bridge/session/live.py `Session`)."""

    id: str
    record: SessionRecord
    route: Route

    def _emit(self, event: Event) -> None: ...

    def _with_prompts(self, back_commands: list[CommandInfo]) -> list[CommandInfo]: ...

    async def _flow(self) -> None: ...

    def _changed(self) -> None: ...

    def cancel(self) -> bool: ...


class Turn:
    """One running turn; the `TurnHandle` a back sees."""

    def __init__(
        self,
        session: TurnHost,
        turn_id: str,
        prompt: list[ContentBlock],
        *,
        message_id: str | None = None,
        message_meta: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        self.turn_id = turn_id
        self.prompt = prompt
        self.message_id = message_id  # the client's own id for its prompt, if its protocol has one
        self.message_meta = message_meta
        # Who asked for it, through which front (bridge/core/identity.py): set by
        # `begin_turn`; the audit line names them, and a back may forward the caller (the
        # A2A back's `forward_identity_header`).
        self.identity: Identity = ANONYMOUS
        self.front = ""
        self.options = dict(session.record.options)
        self.machine = TurnMachine()
        self.machine.apply(TurnInput.PROMPT)
        self.ended: TurnEnded | None = None
        self._done = trio.Event()
        self._on_done: list[Callable[[], None]] = []
        self._cancel = trio.Event()
        self._answers: dict[str, tuple[Question, trio.Event, list[QuestionAnswered]]] = {}
        self.scope: trio.CancelScope | None = None
        self.started = time.monotonic()
        self.started_at = time.time()
        self.first_seq = 0  # the seq of its TurnStarted event
        # Its store record, written with the next flush after it starts and ends; a
        # front may note its own stream position on it (`TurnRecord.stream_seq`).
        self.record: TurnRecord | None = None
        self.first_event_at: float | None = None  # the back's first event (a metric)
        self.invocation: Invocation | None = None  # a `/prompt args` to expand before the back runs
        # Its span (bridge/telemetry), carried with the turn across the tasks it runs in.
        self.trace: TurnTrace = OFF
        # The idle deadline (`SessionManager._watch_idle_turns`): events counted, not timed, so the per-event
        # cost is one increment (moving a live CancelScope's deadline costs ~2 us).
        self.events = 0
        self.asking = 0  # questions waiting for a user: that time is not idle
        self.idled = False  # cut off by the idle deadline
        # The manager's idle watchdog (`SessionManager._watch_idle_turns`): the route's
        # bound, the event count it last saw, and since when nothing came.
        self.idle_s = 0.0
        self.idle_seen = 0
        self.quiet_since = 0.0

    # -- TurnHandle -------------------------------------------------------------
    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    async def wait_cancel_requested(self) -> None:
        await self._cancel.wait()

    def emit(self, event: Event) -> None:
        self.events += 1
        if self.first_event_at is None:
            self.first_event_at = time.monotonic()
            self.trace.event("first_chunk")
        if type(event) is CommandsAvailable:
            event.commands = self.session._with_prompts(event.commands)
        self.session._emit(event)

    async def flow(self) -> None:
        await self.session._flow()

    def set_back_ref(self, ref: str) -> None:
        self.session.record.back_ref = ref

    async def ask(self, question: Question, *, parent_tool_call_id: str | None = None) -> QuestionAnswered:
        if self.machine.state is TurnState.CANCELLING:
            return QuestionAnswered(question_id=question.id, cancelled=True, by="user")
        self.machine.ask(question.id)
        slot: tuple[Question, trio.Event, list[QuestionAnswered]] = (question, trio.Event(), [])
        self._answers[question.id] = slot
        self.emit(QuestionAsked(question=question, parent_tool_call_id=parent_tool_call_id))
        self.session._changed()
        self.asking += 1
        with self.trace.child("question.wait", question_id=question.id, question_kind=question.kind) as span:
            waited = time.monotonic()
            try:
                with trio.move_on_after(self.session.route.question_timeout_s):
                    await slot[1].wait()
            finally:
                self.asking -= 1
                self.events += 1  # the idle time starts again from the answer
            if not slot[2]:
                # No answer in time means reject, never allow (DESIGN.md, complaint 9).
                self._resolve(question.id, rejection(question, by="timeout"))
            answer = slot[2][0]
            span.set(waited_s=round(time.monotonic() - waited, 6), answered_by=answer.by, cancelled=answer.cancelled)
        return answer

    # -- session side -------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Running, waiting for an answer or cancelling: not ended."""
        return self.machine.active

    async def wait(self) -> TurnEnded:
        await self._done.wait()
        assert self.ended is not None
        return self.ended

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the turn's end is stored (what `wait()` waits for), with no task."""
        if self._done.is_set():
            callback()
        else:
            self._on_done.append(callback)

    def open_question(self, question_id: str) -> Question | None:
        slot = self._answers.get(question_id)
        return slot[0] if slot and not slot[2] else None

    def _resolve(self, question_id: str, answer: QuestionAnswered) -> None:
        question, event, box = self._answers[question_id]
        box.append(answer)
        self.machine.answer(question_id)
        self.emit(answer)
        self.session._changed()
        event.set()

    def _request_cancel(self) -> bool:
        if not self.machine.active:
            return False
        self.machine.apply(TurnInput.CANCEL)
        self._cancel.set()
        for qid in list(self.machine.open_questions):
            self._resolve(qid, QuestionAnswered(question_id=qid, cancelled=True, by="user"))
        return True


def rejection(question: Question, *, by: str) -> QuestionAnswered:
    """The answer that refuses `question`: its reject option if it has one, else cancelled."""
    for kind in ("reject_once", "reject_always"):
        for opt in question.options:
            if opt.kind == kind:
                return QuestionAnswered(question_id=question.id, selected=[opt.id], by=by)  # type: ignore[arg-type]
    return QuestionAnswered(question_id=question.id, cancelled=True, by=by)  # type: ignore[arg-type]


def check_answer(question: Question, selected: list[str], text: str | None, values: dict[str, Any] | None) -> None:
    """InvalidParams unless the answer fits `question` (a cancelled answer always does)."""
    known = {o.id for o in question.options}
    unknown = [s for s in selected if s not in known]
    if unknown:
        raise InvalidParams(f"unknown option {unknown[0]!r}; options are {sorted(known)}")
    if len(selected) > 1 and not question.multi_select:
        raise InvalidParams("this question takes one option")
    if not selected and text is None and values is None:
        raise InvalidParams("an answer needs a selected option, text or form values")
    if text is not None and not selected and not question.allow_text and question.kind != "form":
        raise InvalidParams("this question takes one of its options, not free text")
