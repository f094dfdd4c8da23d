"""A session whose live side runs on another instance (bridge/cluster/base.py).

`SessionManager.get` returns a `RemoteSession` when another instance holds the session's
lease. To a front it looks like a `Session`:

- its events *follow* from the store: one task per followed session reads the stored
  batches past the last event it delivered, in order, and waits on the cluster's
  `Watch` (a notification per stored batch, a poll every `_POLL_S` in case one was
  lost); it delivers them to its subscribers under their backpressure, as a live
  session does, and mirrors the running turn (`RemoteTurn`: started, its open
  questions, its end) from them;
- its commands are *forwarded* to the owner (`begin_turn`, `send_answer`,
  `send_cancel`, `set_option`, `flush`, and `save_record` with the front states and
  task rows a front changed here), and their errors come back as the owner raised them;
- when the owner let the session go (`Moved`) or is gone and its lease expired, the
  manager finds the session's new home (`SessionManager.rehome`: maybe this instance,
  loading it from the store) and this object hands everything on to it: its
  subscribers, after delivering every stored event, and each later call.

While it has subscribers the owner is told to flush each event at once (`WatchCmd`), so
a follower sees an event one store round trip after it happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import trio

from bridge.cluster.base import (
    AnswerCmd,
    CancelCmd,
    Cluster,
    Command,
    DescribeCmd,
    FlushCmd,
    Moved,
    OptionCmd,
    OwnerGone,
    PromptCmd,
    PutCmd,
    Reply,
    WatchCmd,
    error_of,
)
from bridge.config import Route
from bridge.core.content import ContentBlock
from bridge.core.events import (
    CommandInfo,
    CommandsAvailable,
    ConfigOption,
    Event,
    OptionsChanged,
    Question,
    QuestionAnswered,
    QuestionAsked,
    TurnEnded,
    TurnStarted,
)
from bridge.errors import BackUnavailable, Busy
from bridge.session.interfaces import Subscriber, protocol_of
from bridge.session.state import FrontState, encode_front_state, load_front_state
from bridge.session.supervised import SupervisedNursery
from bridge.session.turn import new_id
from bridge.store import SessionRecord, Store, TaskRecord, TurnRecord


class _Manager(Protocol):
    """What a remote session needs of the session manager."""

    store: Store
    cluster: Cluster
    accepting: bool
    refusal: str

    def lend_nursery(self) -> SupervisedNursery: ...

    async def read_events(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]: ...

    def event_pages(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> AsyncIterator[list[Event]]: ...

    async def rehome(self, remote: RemoteSession, *, gone: bool = False) -> None: ...

__all__ = ["RemoteSession", "RemoteTurn"]

log = logging.getLogger("bridge.session")

_POLL_S = 1.0  # a follower reads the store at least this often (a lost notification)
_RETRY_S = (0.05, 2.0)  # a failed read is tried again after a backoff between these


class RemoteTurn:
    """A turn running on another instance, as its events show it (the `Turn` surface a front uses)."""

    def __init__(self, record: TurnRecord) -> None:
        self.turn_id = record.turn_id
        self.record = record
        self.started_at = record.started_at
        self.first_seq = record.first_seq
        self.stream_seq = record.stream_seq
        self.prompt: list[ContentBlock] = []
        self.message_id: str | None = None
        self.message_meta: dict[str, Any] | None = None
        self.ended: TurnEnded | None = None
        self.cancel_requested = False
        self._questions: dict[str, Question] = {}
        self._done = trio.Event()
        self._on_done: list[Callable[[], None]] = []

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def open_question(self, question_id: str) -> Question | None:
        return self._questions.get(question_id)

    async def wait(self) -> TurnEnded:
        await self._done.wait()
        assert self.ended is not None
        return self.ended

    def when_done(self, callback: Callable[[], None]) -> None:
        if self._done.is_set():
            callback()
        else:
            self._on_done.append(callback)

    def _end(self, event: TurnEnded) -> None:
        if self._done.is_set():
            return
        self.ended = event
        self._questions.clear()
        self._done.set()
        callbacks, self._on_done = self._on_done, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a front's callback: its bug, nobody else's
                log.exception("turn %s: a when_done callback failed", self.turn_id)


class RemoteSession:
    """A session another instance runs live; see the module docstring."""

    client_services = None  # an editor's files and terminals are where its back runs
    retired = False
    remote = True

    def __init__(self, manager: _Manager, record: SessionRecord, owner: str, route: Route) -> None:
        self.manager = manager
        self.record = record
        self.owner = owner
        self.route = route
        self.id = record.session_id
        self._seq = record.last_seq
        self.turn: RemoteTurn | None = None
        self._subscribers: list[Subscriber] = []
        self._moved_subs: dict[int, Callable[[], None]] = {}  # id(sub) -> its unsubscribe on the new home
        self._front_states: dict[type[Any], FrontState] = {}
        self._staged: dict[str, TaskRecord] = {}
        self._commands: list[CommandInfo] | None = None
        self._options: list[ConfigOption] | None = None
        self._closed = trio.Event()
        self._follow_scope = trio.CancelScope()
        self._watching = False
        self.moved_to: Any = None  # the session's new home once it moved (a Session or RemoteSession)
        self.last_used = trio.current_time()

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        """Mirror the running turn, if any (its events read once), then follow the store."""
        running = await self.manager.store.list_turns(self.id, newest_first=True, limit=1)
        if running and running[0].stop_reason is None:
            turn = running[0]
            self._seq = turn.first_seq - 1
            await self._catch_up(deliver=False)
        self.manager.lend_nursery().start_soon(self._follow)

    async def refresh(self) -> None:
        """Read the record again (a front about to use it: its states may have changed on the owner)."""
        record = await self.manager.store.get_session(self.id)
        if record is not None:
            record.last_seq = max(record.last_seq, self._seq)
            self.record = record
            self._front_states.clear()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
        self._follow_scope.cancel()
        if self._watching:
            self._watching = False
            await self._tell_quietly(WatchCmd(session_id=self.id, on=False))

    def idle_for(self, now: float) -> float | None:
        if self.busy or self._subscribers or self._closed.is_set():
            return None
        return now - self.last_used

    @property
    def busy(self) -> bool:
        return self.turn is not None and self.turn.active

    @property
    def awaiting_answer(self) -> bool:
        return self.turn is not None and bool(self.turn._questions)

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def shared_nursery(self) -> SupervisedNursery:
        return self.manager.lend_nursery()

    # -- following ------------------------------------------------------------------
    async def _follow(self) -> None:
        """The follower's task: stored events past the last delivered, as they come,
        until `close` (which cancels `_follow_scope`)."""
        watch = self.manager.cluster.watch(self.id)
        delay = _RETRY_S[0]
        try:
            with self._follow_scope:
                while True:
                    try:
                        await self._catch_up(deliver=True)
                        delay = _RETRY_S[0]
                    except Exception:  # the store failed (or our bug): this follower retries, nobody else notices
                        log.exception("session %s: following its events from the store failed; retrying", self.id)
                        await trio.sleep(delay)
                        delay = min(delay * 2, _RETRY_S[1])
                        continue
                    await watch.wait_beyond(self._seq, timeout_s=_POLL_S)
        finally:
            watch.close()

    async def _catch_up(self, *, deliver: bool) -> None:
        async for page in self.manager.event_pages(self.id, self._seq):
            for event in page:
                if event.seq is None or event.seq <= self._seq:
                    continue
                self._seq = event.seq
                self._mirror(event)
                if deliver:
                    self._deliver(event)
            if deliver:
                await self._flow()

    def _mirror(self, event: Event) -> None:
        kind = type(event)
        if kind is TurnStarted:
            turn = self._turn_for(event.turn_id, first_seq=event.seq or 0)
            turn.prompt, turn.message_id, turn.message_meta = event.prompt, event.message_id, event.meta
            self.record.turn_count = max(self.record.turn_count, 1)
        elif kind is QuestionAsked and self.turn is not None:
            self.turn._questions[event.question.id] = event.question
        elif kind is QuestionAnswered and self.turn is not None:
            self.turn._questions.pop(event.question_id, None)
        elif kind is TurnEnded:
            turn = self.turn if self.turn is not None and self.turn.turn_id == event.turn_id else None
            self.record.last_stop = event.stop_reason.value
            if turn is not None:
                turn._end(event)
            self.last_used = trio.current_time()
        elif kind is OptionsChanged:
            self._options = event.options
        elif kind is CommandsAvailable:
            self._commands = event.commands
        self.record.last_seq = max(self.record.last_seq, self._seq)

    def _turn_for(self, turn_id: str, *, first_seq: int = 0, record: TurnRecord | None = None) -> RemoteTurn:
        if self.turn is not None and self.turn.turn_id == turn_id:
            if record is not None:
                self.turn.record = record
            return self.turn
        record = record or TurnRecord(turn_id=turn_id, session_id=self.id, started_at=time.time(), first_seq=first_seq)
        self.turn = RemoteTurn(record)
        return self.turn

    def _deliver(self, event: Event) -> None:
        for sub in self._subscribers:
            try:
                sub.deliver(event)
            except Exception:
                self._subscriber_failed(sub, event.seq)

    def _subscriber_failed(self, sub: Subscriber, seq: int | None) -> None:
        log.exception("session %s: a %s subscriber failed at event %s; unsubscribed", self.id, protocol_of(sub), seq)
        self._subscribers = [s for s in self._subscribers if s is not sub]
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

    def subscribe(self, sub: Subscriber) -> Callable[[], None]:
        if self.moved_to is not None:
            return self.moved_to.subscribe(sub)
        self._subscribers = [*self._subscribers, sub]
        self.last_used = trio.current_time()
        if not self._watching:
            self._watching = True
            self.manager.lend_nursery().start_soon(self._tell_quietly, WatchCmd(session_id=self.id, on=True))

        def unsubscribe() -> None:
            self.last_used = trio.current_time()
            moved = self._moved_subs.pop(id(sub), None)
            if moved is not None:
                moved()
            self._subscribers = [s for s in self._subscribers if s is not sub]

        return unsubscribe

    async def history(self, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]:
        await self.flush()
        return await self.manager.read_events(self.id, after_seq, through_seq=through_seq)

    async def history_pages(self, after_seq: int = 0, *, through_seq: int | None = None) -> AsyncIterator[list[Event]]:
        await self.flush()
        async for page in self.manager.event_pages(self.id, after_seq, through_seq=through_seq):
            yield page

    # -- commands -------------------------------------------------------------------
    async def _send(self, command: Command) -> Reply | None:
        """The owner's reply; None when the session moved (`moved_to` is its new home)."""
        try:
            reply = await self.manager.cluster.forward(self.owner, command)
        except OwnerGone:
            await self.manager.rehome(self, gone=True)
            return None
        error = error_of(reply)
        if isinstance(error, Moved):
            await self.manager.rehome(self)
            return None
        if error is not None:
            raise error
        return reply

    async def _tell_quietly(self, command: Command) -> None:
        try:
            await self.manager.cluster.forward(self.owner, command)
        except Exception as exc:  # a hint to the owner (flush sooner): losing it costs only latency
            log.info("session %s: %s not delivered to its owner: %s", self.id, type(command).__name__, exc)

    async def begin_turn(
        self, content: list[ContentBlock], *, message_id: str | None = None, meta: dict[str, Any] | None = None,
        turn_id: str | None = None, record_meta: dict[str, Any] | None = None,
    ) -> Any:  # fmt: skip
        if self.moved_to is not None:
            return await self.moved_to.begin_turn(content, message_id=message_id, meta=meta, turn_id=turn_id, record_meta=record_meta)
        if self.busy:
            raise Busy(f"session {self.id} is already running a turn; cancel it or wait for it to end")
        if not self.manager.accepting:
            raise BackUnavailable(self.manager.refusal)
        tid = turn_id or new_id()
        cmd = PromptCmd(session_id=self.id, turn_id=tid, content=content, message_id=message_id, meta=meta, record_meta=record_meta or {})
        reply = await self._send(cmd)
        if reply is None:
            return await self.begin_turn(content, message_id=message_id, meta=meta, turn_id=tid, record_meta=record_meta)
        turn = self._turn_for(tid, record=reply.turn)
        if not turn.prompt:
            turn.prompt, turn.message_id, turn.message_meta = content, message_id, meta
        if reply.turn is not None:
            turn.started_at, turn.first_seq = reply.turn.started_at, reply.turn.first_seq
        self.last_used = trio.current_time()
        return turn

    async def send_answer(self, question_id: str, **answer: Any) -> None:
        if self.moved_to is not None:
            return await self.moved_to.send_answer(question_id, **answer)
        if await self._send(AnswerCmd(session_id=self.id, question_id=question_id, **answer)) is None:
            return await self.send_answer(question_id, **answer)
        return None

    async def send_cancel(self) -> bool:
        if self.moved_to is not None:
            return bool(await self.moved_to.send_cancel())
        if self.turn is not None and self.turn.active:
            self.turn.cancel_requested = True
        reply = await self._send(CancelCmd(session_id=self.id))
        if reply is None:
            return await self.send_cancel()
        return bool(reply.value)

    def cancel(self) -> bool:
        """`send_cancel` from where a caller cannot wait (a client went away)."""
        if not self.busy:
            return False
        self.manager.lend_nursery().start_soon(self._cancel_quietly)
        return True

    async def _cancel_quietly(self) -> None:
        try:
            await self.send_cancel()
        except Exception as exc:
            log.warning("session %s: cancel not delivered to its owner: %s", self.id, exc)

    def answer(self, question_id: str, **answer: Any) -> None:
        """`send_answer` from where a caller cannot wait (a front cancelling its question)."""
        self.manager.lend_nursery().start_soon(self._answer_quietly, question_id, answer)

    async def _answer_quietly(self, question_id: str, answer: dict[str, Any]) -> None:
        try:
            await self.send_answer(question_id, **answer)
        except Exception as exc:
            log.warning("session %s: answer to %s not delivered: %s", self.id, question_id, exc)

    async def set_option(self, option_id: str, value: str) -> list[ConfigOption]:
        if self.moved_to is not None:
            return await self.moved_to.set_option(option_id, value)
        reply = await self._send(OptionCmd(session_id=self.id, option_id=option_id, value=value))
        if reply is None:
            return await self.set_option(option_id, value)
        self._options = reply.options or []
        return self._options

    async def describe(self) -> None:
        """What only the owner knows: its commands and options (read once, then followed)."""
        reply = await self._send(DescribeCmd(session_id=self.id))
        if reply is not None:
            self._commands, self._options = reply.commands or [], reply.options or []

    def commands(self) -> list[CommandInfo]:
        if self.moved_to is not None:
            return self.moved_to.commands()
        return list(self._commands or [])

    def config_options(self) -> list[ConfigOption]:
        if self.moved_to is not None:
            return self.moved_to.config_options()
        return list(self._options or [])

    async def flush(self) -> None:
        if self.moved_to is not None:
            return await self.moved_to.flush()
        if await self._send(FlushCmd(session_id=self.id)) is None:
            return await self.flush()
        return None

    # -- front state ------------------------------------------------------------------
    def front_state(self, kind: type[Any]) -> Any:
        if self.moved_to is not None:
            return self.moved_to.front_state(kind)
        state = self.find_front_state(kind)
        if state is None:
            state = self._front_states[kind] = kind()
        return state

    def find_front_state(self, kind: type[Any]) -> Any:
        if self.moved_to is not None:
            return self.moved_to.find_front_state(kind)
        state = self._front_states.get(kind)
        if state is None:
            state, _ = load_front_state(self.record.states, kind)
            if state is not None:
                self._front_states[kind] = state
        return state

    def stage_task(self, task: TaskRecord) -> None:
        if self.moved_to is not None:
            return self.moved_to.stage_task(task)
        self._staged[task.task_id] = task
        return None

    async def save_record(self) -> None:
        """The front states changed here and the staged task rows, written by the owner."""
        if self.moved_to is not None:
            return await self.moved_to.save_record()
        states: dict[str, dict[str, Any]] = {}
        for state in self._front_states.values():
            raw, _ = encode_front_state(state)
            if self.record.states.get(state.key) != raw:
                states[state.key] = raw
        tasks, self._staged = list(self._staged.values()), {}
        if not states and not tasks:
            return None
        if await self._send(PutCmd(session_id=self.id, states=states, tasks=tasks)) is None:
            for task in tasks:
                self._staged.setdefault(task.task_id, task)
            return await self.save_record()
        self.record.states.update(states)
        return None

    # -- moving -----------------------------------------------------------------------
    async def hand_on(self, home: Any) -> None:
        """The session now lives at `home`: every stored event delivered here first, then
        each subscriber follows it there, and each later call goes there."""
        try:
            await self._catch_up(deliver=True)
        except Exception:
            log.exception("session %s: events could not be read before it moved", self.id)
        self.moved_to = home
        for front_kind, state in self._front_states.items():
            if home.find_front_state(front_kind) is None:
                home._front_states[front_kind] = state  # made here, not saved yet
        subs, self._subscribers = self._subscribers, []
        for sub in subs:
            self._moved_subs[id(sub)] = home.subscribe(sub)
        self._closed.set()
        self._follow_scope.cancel()

    def __repr__(self) -> str:
        return f"RemoteSession(id={self.id!r}, owner={self.owner!r}, last_seq={self._seq})"

