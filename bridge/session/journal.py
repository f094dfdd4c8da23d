"""A session's journal: its events, turn records and record, written to the store in batches.

`Session._emit` appends each event to the journal's pending list (one append, no I/O);
the manager's one `Flusher` task writes every session that has pending events at most
`[store] flush_interval_s` after the first (sooner past `FLUSH_AT_EVENTS`), each in one
store transaction with its session record and the turn records that changed
(bridge/store/base.py `Store.save`). A back that produces faster than the store takes
waits in `flow()` once `MAX_PENDING_EVENTS` are pending (backpressure keeps unstored
events bounded in memory). A turn's end is flushed before `Turn.wait()` returns
(bridge/session/live.py), so a finished turn is durable before any client hears that
it finished.

Every write of the record goes through here (`flush`, `save_record`): the fronts' typed
state (bridge/session/state.py) whose encoding changed since it was stored, and the
task records a front staged (`stage_task`), go with it. The session record keeps a
summary (turn count, the last stop reason) that the turns update as they start and end.
`flush_or_close` is the journal's boundary (STYLE.md rule 17): events the store cannot
take close that one session, logged, and nothing else.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol, TypeVar

import trio

from bridge.core.events import Event, encode_events
from bridge.session.interfaces import TurnObserver
from bridge.session.state import FrontState, encode_front_state, load_front_state
from bridge.store import SessionRecord, Store, StoredBatch, TaskRecord, TurnRecord
from bridge.telemetry import OFF

__all__ = ["FLUSH_AT_EVENTS", "MAX_PENDING_EVENTS", "Flusher", "Journal"]

log = logging.getLogger("bridge.session")

S = TypeVar("S", bound=FrontState)

# Pending events that wake the flusher early, and the bound past which a producing
# back waits for the store (backpressure keeps unstored events bounded in memory).
FLUSH_AT_EVENTS = 16384
MAX_PENDING_EVENTS = 65536


class _JournalOwner(Protocol):
    """What a journal needs of the session manager."""

    store: Store
    observer: TurnObserver | None
    flusher: Flusher


class Journal:
    """The store side of a `Session` (its base class: the per-event path stays one append).

    The session sets `id`, `record`, `manager`, `_closed` and `_protocols` (its
    subscribers' fronts, for the metric) before calling `_open_journal`."""

    id: str
    record: SessionRecord
    manager: _JournalOwner
    _closed: trio.Event
    _protocols: list[str]

    def _open_journal(self) -> None:
        self._pending: list[Event] = []
        self._unsaved_turns: dict[str, TurnRecord] = {}  # written with the next flush
        self._flush_lock = trio.Lock()
        self._unsaved_tasks: dict[str, TaskRecord] = {}  # staged by a front, written with the next flush
        self._front_states: dict[type[Any], FrontState] = {}  # decoded once (bridge/session/state.py)
        self._kept_as_stored: set[type[Any]] = set()  # states that did not decode: never written back
        self._stored_states: dict[str, bytes] = {}  # each state's JSON as last stored
        self._put_states: set[str] = set()  # replaced by another instance's front: written next

    def _changed_states(self) -> list[str]:
        """Encode every front state into `record.states`; the keys whose JSON changed
        since they were stored (marked stored here; a failed save unmarks them: `_unstore`)."""
        changed: list[str] = []
        for kind, state in self._front_states.items():
            if kind in self._kept_as_stored:
                continue
            raw, encoded = encode_front_state(state)
            if self._stored_states.get(kind.key) != encoded:
                self.record.states[kind.key] = raw
                self._stored_states[kind.key] = encoded
                changed.append(kind.key)
        return changed

    def put_states(self, states: dict[str, dict[str, Any]]) -> None:
        """Front states as a front on another instance changed them (bridge/cluster,
        `PutCmd`): they replace ours, decoded again on next use, written with the next flush."""
        for kind in [k for k in self._front_states if k.key in states]:
            del self._front_states[kind]
            self._kept_as_stored.discard(kind)
        for key, raw in states.items():
            self.record.states[key] = raw
            self._stored_states.pop(key, None)
            self._put_states.add(key)

    def _load_front_state(self, kind: type[S]) -> S | None:
        state, writable = load_front_state(self.record.states, kind)
        if state is not None:
            self._front_states[kind] = state
            if writable:
                self._stored_states[kind.key] = encode_front_state(state)[1]
            else:
                self._kept_as_stored.add(kind)
        return state

    def front_state(self, kind: type[S]) -> S:
        """The typed state a front keeps with this session (bridge/session/state.py):
        decoded from the record on first use, the same object from then on, written back
        with the record. The front changes it in place; `save_record()` stores it now."""
        state = self._front_states.get(kind)
        if state is None:
            state = self._load_front_state(kind)
            if state is None:
                state = self._front_states[kind] = kind()
        return state  # type: ignore[return-value]

    def find_front_state(self, kind: type[S]) -> S | None:
        """`front_state(kind)`, or None when this session has none (its front never made one)."""
        state = self._front_states.get(kind)
        if state is None:
            state = self._load_front_state(kind)
        return state  # type: ignore[return-value]

    def stage_task(self, task: TaskRecord) -> None:
        """Write `task` (a front's task row, bridge/store/base.py `TaskRecord`) with the
        next flush; a later staging of the same task replaces it."""
        if not self._pending and not self._unsaved_turns and not self._unsaved_tasks:
            self.manager.flusher.dirty(self)
        self._unsaved_tasks[task.task_id] = task

    async def flush(self, *, record: bool = False) -> None:
        """Write the pending events, the session record, the turn and task records and
        the front states that changed since the last flush, in one transaction (the
        record alone too when `record`)."""
        async with self._flush_lock:
            states = self._changed_states() if self._front_states else []
            if self._put_states:
                states += [k for k in self._put_states if k not in states]
                self._put_states = set()
            if not (self._pending or self._unsaved_turns or self._unsaved_tasks or states or record):
                return
            batch, self._pending = self._pending, []
            turns, self._unsaved_turns = list(self._unsaved_turns.values()), {}
            tasks, self._unsaved_tasks = list(self._unsaved_tasks.values()), {}
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
            turn = getattr(self, "turn", None)  # the running turn's flush is part of its trace (its end's too)
            trace = turn.trace if turn is not None and turn.ended is None else OFF
            try:
                with trio.CancelScope(shield=True), trace.flush(len(batch)):
                    await self.manager.store.save(self.record, turns=turns, batch=stored, tasks=tasks, states=states)
            except BaseException:
                self._unstore(batch, turns, tasks, states)
                raise

    def _unstore(self, batch: list[Event], turns: list[TurnRecord], tasks: list[TaskRecord], states: list[str]) -> None:
        """A save failed (its transaction wrote nothing): what it carried is pending again,
        before what came meanwhile, so the next flush writes it (or the session closes,
        `flush_or_close`) and nothing is dropped while the session goes on."""
        if batch:
            self._pending[:0] = batch
        for turn in turns:
            self._unsaved_turns.setdefault(turn.turn_id, turn)  # a newer record staged meanwhile wins
        for task in tasks:
            self._unsaved_tasks.setdefault(task.task_id, task)
        for key in states:
            self._stored_states.pop(key, None)  # written again next time
            if not any(k.key == key for k in self._front_states):
                self._put_states.add(key)  # not decoded here: named again explicitly
        if (self._pending or self._unsaved_turns or self._unsaved_tasks) and not self._closed.is_set():
            self.manager.flusher.dirty(self)  # retried once more; a session it closed is not

    async def flush_or_close(self) -> None:
        """`flush`, inside this session's boundary: events the store cannot take (its
        error, or ours in encoding them) close this session, logged, and nothing else."""
        try:
            await self.flush()
        except Exception:
            log.exception("session %s: its events could not be stored; closed", self.id, extra={"route": self.record.route})
            self._closed.set()

    async def save_record(self) -> None:
        """Store the session record now, with what changed of the fronts' state and the
        staged tasks (and any pending events): for a change that must be findable after
        a crash before the next flush."""
        await self.flush(record=True)


class Flusher:
    """The manager's one flusher task for every session: an idle daemon has no timers,
    and the sessions due together share one store transaction each, concurrently."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        # Sessions with events not stored yet, and what wakes the flusher: the first
        # such session (then it waits `interval_s`), or one with many (at once).
        self._pending: dict[Journal, None] = {}
        self._has_pending = trio.Event()
        self._flush_soon = trio.Event()

    def dirty(self, journal: Journal) -> None:
        """`journal` has its first event since its last flush."""
        self._pending[journal] = None
        self._has_pending.set()

    def soon(self) -> None:
        """Flush now rather than at the end of the interval."""
        self._flush_soon.set()

    async def run(self) -> None:
        """Every session's pending events, stored at most `interval_s` after the first."""
        while True:
            await self._has_pending.wait()
            with trio.move_on_after(self.interval_s):
                await self._flush_soon.wait()
            self._flush_soon = trio.Event()
            self._has_pending = trio.Event()
            await self._flush_due()

    async def _flush_due(self) -> None:
        # A method of its own: the sessions flushed are not held by the loop's frame
        # until the next flush (a closed one's memory).
        due, self._pending = list(self._pending), {}
        if len(due) == 1:
            await due[0].flush_or_close()
        else:
            async with trio.open_nursery() as nursery:
                for journal in due:
                    nursery.start_soon(journal.flush_or_close)
