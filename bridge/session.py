"""Live sessions: where fronts and backs meet.

A `SessionManager` owns a nursery in which every live `Session` runs; a session owns
its back session and its turns, so a turn keeps running when the client that started
it goes away (A2A and chat clients may reconnect; an ACP editor that exits ends its
process anyway). Fronts never talk to backs, only to sessions:

- `start_turn(content)` begins a turn (one at a time, else `Busy`), `Turn.wait()` gives
  its `TurnEnded`; `cancel()`, `answer(...)`, `set_option(...)`, `close()`.
- `subscribe(sub)` delivers every event, stamped with the session's gapless sequence
  number, synchronously and in order; a subscriber that is congested pauses the back
  at its next `flow()` (backpressure), or drops itself (its own policy).
- Events are appended to a pending list and written to the store in batches, with
  the session and turn records, by the manager's one flusher; a turn's end is flushed
  before `Turn.wait()` returns, so a finished turn is durable before any client hears
  that it finished.
- A session nobody uses for `[daemon] idle_session_close_s` is closed (its back too);
  `SessionManager.get` brings it back from the store. Live sessions are capped
  (`[daemon] max_live_sessions`, a route's `max_live_sessions`): when full, the
  longest-idle one is closed to make room; with none idle, `Overloaded`.

Fault isolation (STYLE.md rule 17): every delivery to a subscriber runs inside a
boundary; a subscriber that raises is unsubscribed (its `broken()` called, if it has
one) and logged as our bug, and the others and the turn go on. Every back call is
one too: whatever a back raises fails that turn (`TurnEnded` failed), cancels and
closes that fail are logged, and nothing a session does can end the manager. A turn
whose back sends nothing for the route's `turn_idle_timeout_s` fails.

For the daemon (reload, shutdown, metrics): `stop_accepting()` refuses new sessions
and turns from then on (`accepting` off, the `stopping` event set); `drain(grace_s)`
lets running turns finish, then cancels the rest, so every front reports the
cancellation its own way from `TurnEnded(cancelled)` (the daemon sets `drained` after);
`reconfigure(config)` swaps routes (removed routes' sessions are `retired`: no new
turns); an optional `observer` (bridge/metrics.py) hears of sessions, turns and back
errors once each, and of delivered events once per store flush, never per event.

Slash commands (bridge/prompts): `SessionManager.prompts` runs the prompt sources in
the manager's nursery. A session's commands are its back's own plus its route's
prompts (`commands()`); it emits `CommandsAvailable` again whenever they change. A
prompt starting with `/name` is resolved in `start_turn` (an unknown command or a
missing argument raises InvalidParams: no turn starts) and expanded inside the turn
before the back sees it (a source that fails it fails the turn, `PromptError`).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

import trio
from msgspec.structs import replace

from bridge.backs.base import Back, BackSession, ClientServices, SessionContext
from bridge.config import Config, Route
from bridge.core.content import ContentBlock, text_of
from bridge.core.events import (
    CommandInfo,
    CommandsAvailable,
    ConfigOption,
    ConfigValue,
    Event,
    OptionsChanged,
    Question,
    QuestionAnswered,
    QuestionAsked,
    StopReason,
    TurnEnded,
    TurnError,
    TurnStarted,
    decode_events,
    encode_events,
)
from bridge.core.turn import TurnInput, TurnMachine, TurnState
from bridge.errors import BackError, BackUnavailable, Busy, InvalidParams, NotFound, Overloaded
from bridge.logs import set_log_ids
from bridge.prompts.registry import Invocation, PromptRegistry
from bridge.store import SessionRecord, Store, StoredBatch, TurnRecord

__all__ = ["Session", "SessionManager", "Subscriber", "SupervisedNursery", "Turn", "TurnObserver"]

log = logging.getLogger("bridge.session")

# Pending events that wake the flusher early, and the bound past which a producing
# back waits for the store (backpressure keeps unstored events bounded in memory).
_FLUSH_AT_EVENTS = 16384
_MAX_PENDING_EVENTS = 65536


class Subscriber(Protocol):
    """Also, optionally, `broken() -> None`: called once if its `deliver` raised (it has
    then been unsubscribed), so it can tell its client and let go."""

    def deliver(self, event: Event) -> None:
        """Called for every event, in order; must not block."""

    def congested(self) -> bool: ...

    async def wait_uncongested(self) -> None: ...


class TurnObserver(Protocol):
    """Told of what happens, for metrics; each call is cheap and never blocks."""

    def session_opened(self, route: str) -> None: ...

    def turn_ended(self, route: str, outcome: str, seconds: float, first_event_s: float | None) -> None: ...

    def back_failed(self, route: str, kind: str) -> None: ...

    def events_delivered(self, protocol: str, count: int) -> None: ...


def _protocol_of(sub: Subscriber) -> str:
    """The front a subscriber belongs to, for the events-relayed metric (`bridge.fronts.acp.front` → acp)."""
    name = getattr(sub, "protocol", None)
    if isinstance(name, str):
        return name
    module = type(sub).__module__
    if module.startswith("bridge.fronts."):
        return module.split(".")[2]
    return module.rsplit(".", 1)[-1]


class SupervisedNursery:
    """The manager's nursery as lent to backs and fronts (`BackSession.shared_nursery`):
    what they start there cannot take the manager, and with it every session, down.

    A task that raises is logged (ERROR: ours to fix) and ends alone. With `start`, an
    exception raised before the task reports itself started still reaches the caller,
    whose own boundary (a turn, a request) turns it into that client's error.
    """

    __slots__ = ("_nursery",)

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @property
    def cancel_scope(self) -> trio.CancelScope:
        return self._nursery.cancel_scope

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        self._nursery.start_soon(self._guarded, fn, args, name=name or fn)

    async def start(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> Any:
        return await self._nursery.start(self._guarded, fn, args, name=name or fn)

    @staticmethod
    async def _guarded(
        fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        status = None if task_status is trio.TASK_STATUS_IGNORED else _StartedStatus(task_status)
        try:
            if status is None:
                await fn(*args)
            else:
                await fn(*args, task_status=status)
        except Exception:
            if status is not None and not status.reported:
                raise  # to the caller of `start`
            log.exception("a task a session lent the daemon's nursery failed; it ends alone")


class _StartedStatus:
    """A `task_status` that remembers whether the task reported itself started."""

    __slots__ = ("_inner", "reported")

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reported = False

    def started(self, value: Any = None) -> None:
        self.reported = True
        self._inner.started(value)


def new_id() -> str:
    return uuid.uuid4().hex


class Turn:
    """One running turn; the `TurnHandle` a back sees."""

    def __init__(self, session: Session, turn_id: str, prompt: list[ContentBlock]) -> None:
        self.session = session
        self.turn_id = turn_id
        self.prompt = prompt
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
        self.first_event_at: float | None = None  # the back's first event (a metric)
        self.invocation: Invocation | None = None  # a `/prompt args` to expand before the back runs
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
        self.asking += 1
        try:
            with trio.move_on_after(self.session.route.question_timeout_s):
                await slot[1].wait()
        finally:
            self.asking -= 1
            self.events += 1  # the idle time starts again from the answer
        if not slot[2]:
            # No answer in time means reject, never allow (DESIGN.md, complaint 9).
            self._resolve(question.id, _rejection(question, by="timeout"))
        return slot[2][0]

    # -- session side -------------------------------------------------------------
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
        event.set()

    def _request_cancel(self) -> bool:
        if not self.machine.active:
            return False
        self.machine.apply(TurnInput.CANCEL)
        self._cancel.set()
        for qid in list(self.machine.open_questions):
            self._resolve(qid, QuestionAnswered(question_id=qid, cancelled=True, by="user"))
        return True


def _rejection(question: Question, *, by: str) -> QuestionAnswered:
    for kind in ("reject_once", "reject_always"):
        for opt in question.options:
            if opt.kind == kind:
                return QuestionAnswered(question_id=question.id, selected=[opt.id], by=by)  # type: ignore[arg-type]
    return QuestionAnswered(question_id=question.id, cancelled=True, by=by)  # type: ignore[arg-type]


class Session:
    def __init__(self, manager: SessionManager, record: SessionRecord, route: Route, back: Back) -> None:
        self.manager = manager
        self.record = record
        self.route = route
        self.back = back
        self.id = record.session_id
        self._seq = record.last_seq
        self._subscribers: list[Subscriber] = []
        self._protocols: list[str] = []  # each subscriber's front, for the metric
        self._pending: list[Event] = []
        self._unsaved_turns: dict[str, TurnRecord] = {}  # written with the next flush
        self._flush_lock = trio.Lock()
        self._back_session: BackSession | None = None
        self._back_lock = trio.Lock()
        self.turn: Turn | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = trio.Event()
        self._gone = trio.Event()  # run() has ended: its back closed, its events stored
        # Set by the ACP front while an editor is attached (its files and terminals).
        self.client_services: ClientServices | None = None
        self.back_options: list[ConfigOption] = []  # what the back's agent offers
        # Its route was removed by a reload: the running turn may finish, no new one starts.
        self.retired = False
        self._announced: list[CommandInfo] | None = None  # the commands last emitted
        self.last_used = trio.current_time()  # a turn started or ended, a client came or went

    # -- lifecycle ------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            unlisten = self.manager.prompts.listen(self.record.route, self._prompts_changed)
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    await self._closed.wait()
                    if nursery.child_tasks:
                        nursery.cancel_scope.cancel()
            except Exception:
                # The session's boundary (STYLE.md rule 17): a task of its back or of a
                # turn raised (our bug). This session ends; the manager and the others go on.
                log.exception("session %s failed; closed", self.id, extra={"route": self.record.route})
            finally:
                self._closed.set()
                unlisten()
        finally:
            with trio.move_on_after(5, shield=True):
                await self._end_cut_turn()
                await self._close_back()
                await self.flush_or_close()
            self.manager._forget(self)
            self._gone.set()

    async def _end_cut_turn(self) -> None:
        """A turn still running when the session stops (cut off, or the session failed)
        ends here, so its clients hear it and the store has its end."""
        turn = self.turn
        if turn is None or not turn.machine.active or turn._done.is_set():
            return
        if turn.cancel_requested or self.manager._aborted:
            await self._end_turn(turn, StopReason.CANCELLED, None)
        else:
            error = TurnError(message="the session closed while the turn was running", kind="InternalError")
            await self._end_turn(turn, StopReason.FAILED, error)

    async def _close_back(self) -> None:
        back = self._back_session
        if back is None:
            return
        try:
            await back.aclose()
        except BackError as exc:
            log.warning("session %s: back did not close cleanly: %s", self.id, exc.message)
        except Exception:  # a back is our code: our bug, and only this session's
            log.exception("session %s: back raised while closing", self.id)

    async def close(self) -> None:
        """Cancel any running turn (bounded), then free the back and the session."""
        if self.turn is not None and self.turn.machine.active:
            self.cancel()
            with trio.move_on_after(self.route.cancel_grace_s + 1):
                await self.turn.wait()
        self._closed.set()

    def idle_for(self, now: float) -> float | None:
        """How long nobody has used it; None while a turn runs or a client is attached."""
        busy = self.turn is not None and self.turn.machine.active
        if busy or self._subscribers or self.client_services is not None or self._closed.is_set():
            return None
        return now - self.last_used

    # -- SessionHost (what a back may use outside a turn) ----------------------------
    def emit(self, event: Event) -> None:
        if type(event) is CommandsAvailable:
            event.commands = self._with_prompts(event.commands)
        self._emit(event)

    # -- slash commands -------------------------------------------------------------
    def commands(self) -> list[CommandInfo]:
        """The back's own commands, then the route's prompts (a prompt hides a back command of its name)."""
        return self._with_prompts(self.back.info.commands)

    def _with_prompts(self, back_commands: list[CommandInfo]) -> list[CommandInfo]:
        commands = self.manager.prompts.merged(self.record.route, back_commands)
        self._announced = commands
        return commands

    def _prompts_changed(self) -> None:
        if self._closed.is_set():
            return
        commands = self.manager.prompts.merged(self.record.route, self.back.info.commands)
        if commands != self._announced:
            self._announced = commands
            self._emit(CommandsAvailable(commands=commands))

    def set_back_options(self, options: list[ConfigOption]) -> None:
        self.back_options = options
        self._emit(OptionsChanged(options=self.config_options()))

    @property
    def shared_nursery(self) -> SupervisedNursery:
        assert self.manager._nursery is not None
        return SupervisedNursery(self.manager._nursery)

    # -- events ---------------------------------------------------------------------
    def _emit(self, event: Event) -> None:
        self._seq += 1
        event.seq = self._seq
        if not self._pending:
            self.manager._dirty(self)
        self._pending.append(event)
        for sub in self._subscribers:
            # One subscriber's boundary (STYLE.md rule 17): free when nothing raises.
            try:
                sub.deliver(event)
            except Exception:
                self._subscriber_failed(sub, event.seq)

    def _subscriber_failed(self, sub: Subscriber, seq: int | None) -> None:
        """`sub` raised: our bug in a front. Unsubscribe it and tell it; nobody else notices."""
        at = f" at event {seq}" if seq is not None else ""
        log.exception("session %s: a %s subscriber failed%s; unsubscribed", self.id, _protocol_of(sub), at)
        if sub in self._subscribers:
            i = self._subscribers.index(sub)  # copy on write, as in `subscribe`
            self._subscribers = self._subscribers[:i] + self._subscribers[i + 1 :]
            self._protocols = self._protocols[:i] + self._protocols[i + 1 :]
        broken = getattr(sub, "broken", None)
        if callable(broken):
            try:
                broken()
            except Exception:
                log.exception("session %s: a failed subscriber could not be told", self.id)

    async def _flow(self) -> None:
        for sub in self._subscribers:
            try:
                if sub.congested():
                    await sub.wait_uncongested()
            except Exception:
                self._subscriber_failed(sub, None)
        pending = len(self._pending)
        if pending >= _MAX_PENDING_EVENTS:
            await self.flush()
            return
        if pending >= _FLUSH_AT_EVENTS:
            self.manager._flush_soon.set()  # written in the background while the back goes on
        await trio.lowlevel.checkpoint()

    def subscribe(self, sub: Subscriber) -> Callable[[], None]:
        # Copy on write: `_emit` iterates the list it found, so a subscriber that
        # (un)subscribes during a delivery never makes another one miss that event,
        # and the hot path pays nothing for it.
        self._subscribers = [*self._subscribers, sub]
        self._protocols = [*self._protocols, _protocol_of(sub)]
        self.last_used = trio.current_time()

        def unsubscribe() -> None:
            self.last_used = trio.current_time()
            if sub in self._subscribers:
                i = self._subscribers.index(sub)
                self._subscribers = self._subscribers[:i] + self._subscribers[i + 1 :]
                self._protocols = self._protocols[:i] + self._protocols[i + 1 :]

        return unsubscribe

    @property
    def last_seq(self) -> int:
        return self._seq

    async def history(self, after_seq: int = 0) -> list[Event]:
        """Every event after `after_seq`: stored batches, then what is still pending."""
        await self.flush()
        return await self.manager.read_events(self.id, after_seq)

    async def flush(self) -> None:
        """Write the pending events, the session record and the turn record that changed
        since the last flush, in one transaction."""
        async with self._flush_lock:
            if not self._pending and not self._unsaved_turns:
                return
            batch, self._pending = self._pending, []
            turns, self._unsaved_turns = list(self._unsaved_turns.values()), {}
            stored = None
            if batch:
                observer = self.manager.observer
                if observer is not None:
                    for protocol in self._protocols:  # once per flush, not per event
                        observer.events_delivered(protocol, len(batch))
                blob = encode_events(batch)  # type: ignore[arg-type]
                self.record.updated_at = time.time()
                self.record.last_seq = batch[-1].seq
                stored = StoredBatch(first_seq=batch[0].seq, last_seq=batch[-1].seq, blob=blob)
            with trio.CancelScope(shield=True):
                await self.manager.store.save(self.record, turns=turns, batch=stored)

    async def flush_or_close(self) -> None:
        """`flush`, inside this session's boundary: events the store cannot take (its
        error, or ours in encoding them) close this session, logged, and nothing else."""
        try:
            await self.flush()
        except Exception:
            log.exception("session %s: its events could not be stored; closed", self.id, extra={"route": self.record.route})
            self._closed.set()

    # -- turns ----------------------------------------------------------------------
    def start_turn(self, content: list[ContentBlock]) -> Turn:
        """Begin a turn now (synchronously, so a cancel that follows finds it)."""
        if self.turn is not None and self.turn.machine.active:
            raise Busy(f"session {self.id} is already running a turn; cancel it or wait for it to end")
        if self._nursery is None or self._closed.is_set():
            raise NotFound(f"session {self.id} is closed")
        if self.retired:
            raise NotFound(f"route {self.record.route!r} of session {self.id} was removed from the configuration")
        if not self.manager.accepting:
            raise BackUnavailable(self.manager.refusal)
        back_commands = [c.name for c in self.back.info.commands]
        invocation = self.manager.prompts.resolve(self.record.route, content, back_commands)  # InvalidParams: no turn
        turn = Turn(self, new_id(), content)
        turn.invocation = invocation
        self.turn = turn
        self.last_used = trio.current_time()
        if self.record.title is None:
            self.record.title = " ".join(text_of(content).split())[:80] or None
        self._emit(TurnStarted(turn_id=turn.turn_id, prompt=content))
        turn.first_seq = self._seq
        # Stored with its TurnStarted event at the next flush, not on any client's path.
        self._unsaved_turns[turn.turn_id] = TurnRecord(
            turn_id=turn.turn_id, session_id=self.id, started_at=turn.started_at, first_seq=turn.first_seq
        )
        self._nursery.start_soon(self._run_turn, turn)
        return turn

    async def _ensure_back(self) -> BackSession:
        async with self._back_lock:
            if self._back_session is None:
                assert self._nursery is not None
                ctx = SessionContext(
                    session_id=self.id,
                    route=self.record.route,
                    cwd=self.record.cwd,
                    options=dict(self.record.options),
                    back_ref=self.record.back_ref,
                    meta=dict(self.record.meta),
                    host=self,
                )
                self._back_session = await self.back.open_session(ctx, nursery=self._nursery)
            return self._back_session

    async def _run_turn(self, turn: Turn) -> None:
        set_log_ids(route=self.record.route, session=self.id, turn=turn.turn_id)
        log.info("turn started")
        stop, error = StopReason.END_TURN, None
        limit = self.route.turn_timeout_s
        idle_s = self.route.turn_idle_timeout_s
        # Cancelled by its deadline, by the manager's idle watchdog, or cut off after a
        # cancel request (`_enforce_cancel`).
        with trio.CancelScope(deadline=trio.current_time() + limit if limit else math.inf) as scope:
            turn.scope = scope
            if idle_s:
                self.manager.watch_idle(turn, idle_s)
            try:
                stop, error = await self._call_back(turn)
            finally:
                self.manager.unwatch_idle(turn)
        if turn.idled and not turn.cancel_requested:
            stop = StopReason.FAILED
            error = TurnError(message=f"the agent sent nothing for {idle_s:g} s (turn_idle_timeout_s)", kind="timeout")
        elif scope.cancelled_caught and not turn.cancel_requested:
            stop = StopReason.FAILED
            error = TurnError(message=f"turn exceeded the route's turn_timeout_s ({limit:g} s)", kind="timeout")
        if error is not None and self.manager.observer is not None:
            self.manager.observer.back_failed(self.record.route, error.kind or "BackError")
        if turn.cancel_requested:
            # ACP §cancellation: once cancelled, the answer is `cancelled`, never an error.
            stop, error = StopReason.CANCELLED, None
        await self._end_turn(turn, stop, error)

    async def _call_back(self, turn: Turn) -> tuple[StopReason, TurnError | None]:
        """The back runs the turn inside its boundary (STYLE.md rule 17): whatever it
        raises becomes this turn's failure and a log line, never the session's end."""
        try:
            if turn.invocation is not None:
                # The back gets the prompt's messages; the log keeps what the user typed.
                turn.prompt = await self.manager.prompts.expand(turn.invocation)
            back = await self._ensure_back()
            return await back.prompt(turn), None
        except BackError as exc:
            log.warning("session %s turn %s: back failed: %s", self.id, turn.turn_id, exc.message)
            return StopReason.FAILED, TurnError(message=exc.message, kind=type(exc).__name__)
        except Exception as exc:  # a back is our code: our bug, and only this turn's
            log.exception("session %s turn %s: the back raised", self.id, turn.turn_id)
            message = f"internal error in the bridge's {self.record.route!r} back ({type(exc).__name__}); see its log"
            return StopReason.FAILED, TurnError(message=message, kind="InternalError")

    async def _end_turn(self, turn: Turn, stop: StopReason, error: TurnError | None) -> None:
        for qid in list(turn.machine.open_questions):
            turn._resolve(qid, QuestionAnswered(question_id=qid, cancelled=True, by="user"))
        turn.machine.apply(TurnInput.END)
        ended = TurnEnded(turn_id=turn.turn_id, stop_reason=stop, error=error)
        self._emit(ended)
        # The end record replaces a start record not yet flushed; either way it is
        # written after it (one flush at a time), with the last events and the session.
        self._unsaved_turns[turn.turn_id] = TurnRecord(
            turn_id=turn.turn_id,
            session_id=self.id,
            started_at=turn.started_at,
            first_seq=turn.first_seq,
            ended_at=time.time(),
            last_seq=ended.seq,
            stop_reason=stop.value,
            error=error.message if error else None,
        )
        with trio.CancelScope(shield=True):
            await self.flush_or_close()  # a store failure must not leave the turn's waiters hanging
        turn.ended = ended
        turn._done.set()
        self.last_used = trio.current_time()
        for callback in turn._on_done:
            callback()
        turn._on_done.clear()
        seconds = time.monotonic() - turn.started
        first = turn.first_event_at - turn.started if turn.first_event_at is not None else None
        log.info("turn ended: %s after %.3f s", stop.value, seconds)
        if self.manager.observer is not None:
            self.manager.observer.turn_ended(self.record.route, stop.value, seconds, first)

    def cancel(self) -> bool:
        """Ask the running turn to stop; it ends `cancelled` within `cancel_grace_s`.

        Synchronous, so a cancel read right after a prompt always finds its turn;
        telling the back happens in the session's nursery.
        """
        turn = self.turn
        if turn is None or not turn._request_cancel():
            return False
        assert self._nursery is not None
        self._nursery.start_soon(self._enforce_cancel, turn)
        if self._back_session is not None:
            self._nursery.start_soon(self._cancel_back, self._back_session)
        return True

    async def _cancel_back(self, back: BackSession) -> None:
        try:
            await back.cancel()
        except BackError as exc:
            log.warning("session %s: back could not cancel: %s", self.id, exc.message)
        except Exception:  # our bug in a back; the turn is still cut off by `_enforce_cancel`
            log.exception("session %s: back raised while cancelling", self.id)

    async def _enforce_cancel(self, turn: Turn) -> None:
        with trio.move_on_after(self.route.cancel_grace_s):
            await turn._done.wait()
            return
        if turn.scope is not None and not turn._done.is_set():
            log.warning("session %s: back did not stop within %gs; cut off", self.id, self.route.cancel_grace_s)
            turn.scope.cancel()

    def answer(
        self,
        question_id: str,
        *,
        selected: list[str] | None = None,
        text: str | None = None,
        values: dict[str, Any] | None = None,
        cancelled: bool = False,
        by: Literal["user", "front"] = "user",
    ) -> None:
        """Answer an open question; InvalidParams if the answer does not fit it.

        `by="front"` (with `cancelled`): the front had no way to show the question,
        so the back may ask in the chat instead (the A2A back does, protocols.md §6.4).
        """
        turn = self.turn
        question = turn.open_question(question_id) if turn else None
        if turn is None or question is None:
            raise NotFound(f"no open question {question_id!r} in session {self.id}")
        selected = selected or []
        if not cancelled:
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
        turn._resolve(
            question_id,
            QuestionAnswered(
                question_id=question_id, selected=selected, text=text, values=values, cancelled=cancelled, by=by
            ),
        )

    # -- options --------------------------------------------------------------------
    def config_options(self) -> list[ConfigOption]:
        """The route's options, then those the back's agent offers (route ids win)."""
        own = [
            ConfigOption(
                id=o.id,
                name=o.name,
                current=self.record.options.get(o.id, o.default or o.values[0].value),
                values=[ConfigValue(value=v.value, name=v.name, description=v.description) for v in o.values],
                description=o.description,
                category=o.category,
            )
            for o in self.route.options
        ]
        ids = {o.id for o in own}
        return own + [o for o in self.back_options if o.id not in ids]

    async def set_option(self, option_id: str, value: str) -> list[ConfigOption]:
        spec = next((o for o in self.route.options if o.id == option_id), None)
        offered = None if spec is not None else next((o for o in self.back_options if o.id == option_id), None)
        if spec is None and offered is None:
            raise InvalidParams(f"unknown option {option_id!r}; options are {[o.id for o in self.config_options()]}")
        values = [v.value for v in (spec or offered).values]  # type: ignore[union-attr]
        if value not in values:
            raise InvalidParams(f"{value!r} is not a value of {option_id!r}: {values}")
        self.record.options[option_id] = value
        if self._back_session is not None:
            await self._back_session.set_option(option_id, value)
        if offered is not None:
            self.back_options = [replace(o, current=value) if o.id == option_id else o for o in self.back_options]
        options = self.config_options()
        self._emit(OptionsChanged(options=options))
        await self.manager.store.put_session(self.record)
        return options


class SessionManager:
    """Creates, finds and runs sessions; owns their nursery."""

    def __init__(self, config: Config, store: Store, make_back: Callable[[str, Route], Back]) -> None:
        self.config = config
        self.store = store
        self._make_back = make_back
        self._backs: dict[str, Back] = {}
        self._live: dict[str, Session] = {}
        self._nursery: trio.Nursery | None = None
        # Running turns under a route's `turn_idle_timeout_s`: one watchdog for them all
        # (`_watch_idle_turns`), so a turn costs no task and an event one increment.
        self._idle_turns: set[Turn] = set()
        self._idle_wakeup = trio.Event()
        self._idle_step = math.inf  # how long the watchdog sleeps now
        # Sessions with events not stored yet, and what wakes the flusher: the first
        # such session (then it waits flush_interval_s), or one with many (at once).
        self._pending: dict[Session, None] = {}
        self._has_pending = trio.Event()
        self._flush_soon = trio.Event()
        self.observer: TurnObserver | None = None
        self.accepting = True  # False: new sessions and turns are refused with `refusal`
        self.refusal = "the bridge is shutting down"
        self.stopping = trio.Event()  # the daemon stops: set with `accepting` off, for good
        self.drained = trio.Event()  # ... and the stop's drain has ended every running turn
        # Predicates by which a front keeps an idle session live (an A2A task waiting for input).
        self.keep_alive: list[Callable[[Session], bool]] = []
        # What fronts finish after the drain, before the sessions close (A2A webhooks);
        # the daemon runs them concurrently, bounded by `[server] graceful_timeout_s`.
        self.before_close: list[Callable[[], Awaitable[None]]] = []
        self._aborted = False
        self.prompts = PromptRegistry(config)  # slash commands; its MCP sources run in our nursery

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Turns a killed process left running end now, before any session can load
        # them: every front then replays their end (bridge/store/base.py).
        for cut in await self.store.close_cut_turns():
            log.warning("turn cut short by a stopped process: closed as interrupted",
                        extra={"session": cut.session_id, "turn": cut.turn_id})  # fmt: skip
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.prompts.run)
            nursery.start_soon(self._flusher)
            nursery.start_soon(self._close_idle)
            nursery.start_soon(self._watch_idle_turns)
            task_status.started()
            await trio.sleep_forever()

    async def _close_idle(self) -> None:
        """Close live sessions nobody has used for `[daemon] idle_session_close_s`, so a
        long-running daemon's memory and agent processes stay bounded; `get()` brings one
        back from the store when a client asks for it."""
        while True:
            limit = self.config.daemon.idle_session_close_s
            await trio.sleep(max(1.0, limit / 4) if limit else 60.0)
            if not limit:
                continue
            now = trio.current_time()
            for session in list(self._live.values()):
                idle = session.idle_for(now)
                if idle is not None and idle >= limit and not any(keep(session) for keep in self.keep_alive):
                    log.info("session idle for %.0f s: closed", idle, extra={"route": session.record.route, "session": session.id})
                    await session.close()

    def watch_idle(self, turn: Turn, idle_s: float) -> None:
        turn.idle_s, turn.idle_seen, turn.quiet_since = idle_s, turn.events, trio.current_time()
        self._idle_turns.add(turn)
        if idle_s / 4 < self._idle_step:
            self._idle_wakeup.set()  # the watchdog sleeps too long for this turn's bound

    def unwatch_idle(self, turn: Turn) -> None:
        self._idle_turns.discard(turn)

    async def _watch_idle_turns(self) -> None:
        """Cut off a turn once its back has sent nothing for its route's
        `turn_idle_timeout_s` (a question waiting for its user does not count).

        Each turn is looked at every quarter of its bound at least, so it fails between
        1 and 1.25 times the bound after the back's last event; an event costs one
        increment (`Turn.events`) instead of a deadline move (STYLE.md rule 15's idle
        scope, made cheap for the per-event path)."""
        while True:
            self._idle_step = min((t.idle_s for t in self._idle_turns), default=math.inf) / 4
            with trio.move_on_after(self._idle_step):
                await self._idle_wakeup.wait()
            if self._idle_wakeup.is_set():
                self._idle_wakeup = trio.Event()
            now = trio.current_time()
            for turn in list(self._idle_turns):
                if turn.events != turn.idle_seen or turn.asking:
                    turn.idle_seen, turn.quiet_since = turn.events, now
                elif now - turn.quiet_since >= turn.idle_s - 1e-9 and not turn.idled:
                    s = turn.session
                    log.warning("session %s turn %s: the back sent nothing for %g s; failed", s.id, turn.turn_id, turn.idle_s)
                    turn.idled = True
                    self._idle_turns.discard(turn)
                    assert turn.scope is not None
                    turn.scope.cancel()

    def _dirty(self, session: Session) -> None:
        """`session` has its first event since its last flush."""
        self._pending[session] = None
        self._has_pending.set()

    async def _flusher(self) -> None:
        """Every session's pending events, stored at most `flush_interval_s` after the first
        (sooner past `_FLUSH_AT_EVENTS`); one task for all sessions, so an idle daemon has
        no timers, and the sessions due together share one store transaction."""
        interval = self.config.store.flush_interval_s
        while True:
            await self._has_pending.wait()
            with trio.move_on_after(interval):
                await self._flush_soon.wait()
            self._flush_soon = trio.Event()
            self._has_pending = trio.Event()
            due, self._pending = list(self._pending), {}
            if len(due) == 1:
                await due[0].flush_or_close()
            else:
                async with trio.open_nursery() as nursery:
                    for session in due:
                        nursery.start_soon(session.flush_or_close)

    def back_for(self, route_name: str) -> Back:
        back = self._backs.get(route_name)
        if back is None:
            if route_name not in self.config.routes:
                raise NotFound(f"no route named {route_name!r}; routes are {sorted(self.config.routes)}")
            back = self._backs[route_name] = self._make_back(route_name, self.config.routes[route_name])
        return back

    async def create(self, route_name: str, *, cwd: str = "", meta: dict[str, Any] | None = None, lazy: bool = False) -> Session:
        """A new live session. `lazy`: for a caller that starts a turn in it at once
        (A2A); its record is then stored with that turn's first flush, not before."""
        if not self.accepting:
            raise BackUnavailable(self.refusal)
        back = self.back_for(route_name)
        await self._make_room(route_name)  # before its record is stored: a refusal leaves nothing
        now = time.time()
        route = self.config.routes[route_name]
        record = SessionRecord(
            session_id=new_id(),
            route=route_name,
            cwd=cwd,
            created_at=now,
            updated_at=now,
            options={o.id: o.default or o.values[0].value for o in route.options},
            meta=meta or {},
        )
        if not lazy:
            await self.store.put_session(record)
        session = await self._start(record, back)
        log.info("session created", extra={"route": route_name, "session": record.session_id})
        if self.observer is not None:
            self.observer.session_opened(route_name)
        return session

    async def get(self, session_id: str) -> Session:
        """The live session, started from the store if needed; NotFound otherwise."""
        live = self._live.get(session_id)
        if live is not None:
            return live
        record = await self.store.get_session(session_id)
        if record is None:
            raise NotFound(f"unknown session {session_id!r}")
        if record.route not in self.config.routes:
            raise NotFound(f"session {session_id!r} belongs to route {record.route!r}, which is not configured")
        live = self._live.get(session_id)  # another task may have started it meanwhile
        if live is not None:
            return live
        return await self._start(record, self.back_for(record.route))

    async def _start(self, record: SessionRecord, back: Back) -> Session:
        assert self._nursery is not None, "SessionManager.run() is not running"
        await self._make_room(record.route)
        live = self._live.get(record.session_id)  # started by another task while we made room
        if live is not None:
            return live
        session = Session(self, record, self.config.routes[record.route], back)
        self._live[record.session_id] = session
        await self._nursery.start(session.run)
        return session

    async def _make_room(self, route_name: str) -> None:
        """Under the live-session caps (`[daemon] max_live_sessions`, the route's
        `max_live_sessions`), closing the longest-idle session of the full pool (it stays
        in the store; `get` brings it back); `Overloaded` when none of them is idle."""
        while True:
            total = self.config.daemon.max_live_sessions
            per_route = self.config.routes[route_name].max_live_sessions if route_name in self.config.routes else None
            if per_route is None and len(self._live) < total:
                return  # the common case, without a look at every live session
            # Sessions already closing are leaving (within their 5 s close): not counted,
            # so concurrent requests each make room instead of finding nothing idle.
            staying = [s for s in self._live.values() if not s._closed.is_set()]
            pool: list[Session] | None = None
            if len(staying) >= total:
                pool, what = staying, f"[daemon] max_live_sessions ({total})"
            elif per_route is not None:
                mine = [s for s in staying if s.record.route == route_name]
                if len(mine) >= per_route:
                    pool, what = mine, f"route {route_name!r} max_live_sessions ({per_route})"
            if pool is None:
                return
            now = trio.current_time()
            idle = [(d, s) for s in pool if (d := s.idle_for(now)) is not None and not any(k(s) for k in self.keep_alive)]
            if not idle:
                log.warning("new session refused: %s reached, none idle", what)
                raise Overloaded(f"too many live sessions: {what} reached and none is idle; try again later")
            _, victim = max(idle, key=lambda pair: pair[0])
            log.info("live-session cap reached: the longest-idle session closed", extra={"route": victim.record.route, "session": victim.id})
            await victim.close()
            await victim._gone.wait()  # its events stored before another copy could load it

    def _forget(self, session: Session) -> None:
        if self._live.get(session.id) is session:
            del self._live[session.id]

    def live(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    async def read_events(self, session_id: str, after_seq: int = 0) -> list[Event]:
        out: list[Event] = []
        for batch in await self.store.read_batches(session_id, after_seq=after_seq):
            out.extend(e for e in decode_events(batch.blob) if e.seq > after_seq)
        return out

    async def close_all(self) -> None:
        for session in list(self._live.values()):
            if self._aborted:
                return  # `abort` stopped every session
            await session.close()

    # -- the daemon: reload, shutdown, metrics ------------------------------------------------
    def live_counts(self) -> dict[str, tuple[int, int]]:
        """route → (live sessions, running turns)."""
        counts: dict[str, tuple[int, int]] = {}
        for s in self._live.values():
            n, t = counts.get(s.record.route, (0, 0))
            counts[s.record.route] = (n + 1, t + (1 if s.turn is not None and s.turn.machine.active else 0))
        return counts

    def reconfigure(self, config: Config) -> tuple[dict[str, Back], list[Session]]:
        """Use `config` from now on. New and changed routes serve new sessions; live
        sessions keep the route they started with; those of removed routes are retired.
        Returns the backs no new session will use (of changed and removed routes, by
        route name) and the sessions retired."""
        old, self.config = self.config, config
        self.prompts.reconfigure(config)
        dropped = {
            name: self._backs.pop(name)
            for name in list(self._backs)
            if name not in config.routes or config.routes[name] != old.routes.get(name)
        }
        retired = [s for s in self._live.values() if s.record.route not in config.routes]
        for session in retired:
            session.retired = True
        return dropped, retired

    async def drain(self, grace_s: float, *, sessions: list[Session] | None = None) -> int:
        """Let running turns finish within `grace_s`, then cancel the rest and wait for
        them to end (each within its route's cancel grace). Returns how many were cancelled."""
        live = list(self._live.values()) if sessions is None else sessions
        turns = [s.turn for s in live if s.turn is not None and s.turn.machine.active]
        if not turns:
            return 0
        with trio.move_on_after(grace_s):
            for turn in turns:
                await turn.wait()
        late = [t for t in turns if not t._done.is_set()]
        for turn in late:
            log.info("turn still running after %g s: cancelled", grace_s,
                     extra={"route": turn.session.record.route, "session": turn.session.id, "turn": turn.turn_id})  # fmt: skip
            turn.session.cancel()
        with trio.move_on_after(max((t.session.route.cancel_grace_s for t in late), default=0) + 1):
            for turn in late:
                await turn.wait()
        return len(late)

    def stop_accepting(self, refusal: str) -> None:
        """The daemon stops: refuse new sessions and turns from now on, saying `refusal`."""
        self.accepting = False
        self.refusal = refusal
        self.stopping.set()

    def abort(self) -> None:
        """Stop every session now (a second SIGTERM): their backs still end their processes."""
        self._aborted = True
        self.stop_accepting(self.refusal)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
