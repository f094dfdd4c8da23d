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

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from bridge.cluster.base import WatchCmd
from bridge.config import Route
from bridge.core.events import (
    CommandInfo,
    CommandsAvailable,
    ConfigOption,
    Event,
    OptionsChanged,
    QuestionAnswered,
    QuestionAsked,
    TurnEnded,
    TurnStarted,
)
from bridge.session.interfaces import Subscriber, protocol_of, tell_broken, wait_subscribers
from bridge.session.forwarding import Forwarding
from bridge.session.remote_turn import FollowerHost, RemoteTurn
from bridge.session.state import FrontState, encode_front_state
from bridge.session.supervised import SupervisedNursery
from bridge.store import SessionRecord, TaskRecord, TurnRecord


__all__ = ["RemoteSession", "RemoteTurn"]

log = logging.getLogger("bridge.session")

_POLL_S = 1.0  # a follower reads the store at least this often (a lost notification)
_RETRY_S = (0.05, 2.0)  # a failed read is tried again after a backoff between these
_HELD_MAX = 4096  # events a moving subscriber's gate holds while the stored ones are read
# What changes the session's status in a listing (bridge/session/changes.py).
_STATUS_EVENTS = frozenset({TurnStarted, QuestionAsked, QuestionAnswered, TurnEnded})


class RemoteSession(Forwarding):
    """A session another instance runs live; see the module docstring."""

    client_services = None  # an editor's files and terminals are where its back runs
    retired = False
    remote = True

    def __init__(self, manager: FollowerHost, record: SessionRecord, owner: str, route: Route) -> None:
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
        try:
            await self.describe()
        except Exception as exc:  # its commands and options read as none until it says more
            log.info("session %s: its owner did not describe it: %s", self.id, exc)

    async def refresh(self) -> None:
        """Read the record again (a front about to use it: its states may have changed on
        the owner). A state a front here changed and has not sent yet is kept."""
        record = await self.manager.store.get_session(self.id)
        if record is not None:
            record.last_seq = max(record.last_seq, self._seq)
            old, self.record = self.record, record
            for kind, state in list(self._front_states.items()):
                if encode_front_state(state)[0] == old.states.get(kind.key):
                    del self._front_states[kind]  # unchanged here: read again from the new record

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
        self._follow_scope.cancel()
        if self._watching:  # a hint, never waited for: the owner may be stopping too
            self._watching = False
            with contextlib.suppress(Exception):  # the manager's nursery is gone: the daemon stops
                self.manager.lend_nursery().start_soon(self._tell_quietly, WatchCmd(session_id=self.id, on=False))

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
        if kind in _STATUS_EVENTS:
            self.manager.changes.changed(self.id)

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
        tell_broken(sub, self.id)

    async def _flow(self) -> None:
        await wait_subscribers(self._subscribers, self._subscriber_failed)

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

    # -- moving -----------------------------------------------------------------------
    async def hand_on(self, home: Any) -> None:
        """The session now lives at `home`: each later call goes there, and each
        subscriber follows it there without a gap or a repeat. Each is subscribed there
        first through a `_Gate` that holds what `home` delivers, then given the stored
        events past the last it saw, then what was held, each event once, by sequence."""
        self.moved_to = home
        self._follow_scope.cancel()  # our follower delivers nothing more
        for front_kind, state in self._front_states.items():
            if home.find_front_state(front_kind) is None:
                home._front_states[front_kind] = state  # made here, not saved yet
        subs, self._subscribers = self._subscribers, []
        gates = [_Gate(sub, self._seq) for sub in subs]
        for gate in gates:
            self._moved_subs[id(gate.sub)] = home.subscribe(gate)
        try:
            for _ in range(3):  # again while a gate had to let held events go (the store has them then)
                async for page in self.manager.event_pages(self.id, min((g.after for g in gates), default=self._seq)):
                    for event in page:
                        for gate in gates:
                            gate.feed(event)
                if not any(g.overflowed for g in gates):
                    break
                for gate in gates:
                    gate.overflowed = False
                await home.flush()
        except Exception:  # the store failed: what `home` delivers still comes
            log.exception("session %s: stored events could not be read as it moved", self.id)
        for gate in gates:
            gate.open()
        self._closed.set()
        if self._watching:  # the old owner need not flush for us any more
            self._watching = False
            with contextlib.suppress(Exception):
                self.manager.lend_nursery().start_soon(self._tell_quietly, WatchCmd(session_id=self.id, on=False))

    def __repr__(self) -> str:
        return f"RemoteSession(id={self.id!r}, owner={self.owner!r}, last_seq={self._seq})"


class _Gate:
    """A subscriber handed on to a session's new home (`RemoteSession.hand_on`): until
    `open`, what the home delivers is held (bounded: past `_HELD_MAX` the oldest go and
    are read from the store again after the home flushed) while the stored events are
    fed; from then on each event passes once, in order, by its sequence number."""

    def __init__(self, sub: Subscriber, after: int) -> None:
        self.sub, self.after = sub, after
        self._held: list[Event] | None = []
        self.overflowed = False  # held events were let go: read them from the store again

    def __getattr__(self, name: str) -> Any:  # `protocol`, `broken`, ...: the subscriber's own
        return getattr(self.sub, name)

    def feed(self, event: Event) -> None:
        if event.seq is not None and event.seq > self.after:
            self.after = event.seq
            self.sub.deliver(event)

    def deliver(self, event: Event) -> None:
        if self._held is None:
            self.feed(event)
        else:
            self._held.append(event)
            if len(self._held) > _HELD_MAX:
                del self._held[: len(self._held) - _HELD_MAX]
                self.overflowed = True

    def open(self) -> None:
        held, self._held = self._held or [], None
        for event in held:
            self.feed(event)

    def congested(self) -> bool:
        return bool(self.sub.congested())

    async def wait_uncongested(self) -> None:
        await self.sub.wait_uncongested()
