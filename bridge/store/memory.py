"""An in-memory `Store` for unit tests: plain dicts, lost when the process ends.

Records are copied in and out through the same JSON encoding the SQLite store uses
for its JSON columns, so a test sees what the daemon would see: no aliasing between
the caller's record and the stored one, and `meta` must be JSON-able here too.

Its owners (bridge/store/base.py) are its generations: each `open` starts one, so a
test that closes and reopens a store sees the turns of the earlier one as cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import msgspec

from bridge.core.access import owner_of
from bridge.errors import InternalError
from bridge.store import listing
from bridge.store.base import (
    CUT_TASK_STATE, SessionRecord, StoredBatch, StoreStats, TaskPage, TaskRecord, TurnRecord, cut_turn_end,
)  # fmt: skip

__all__ = ["MemoryStore"]

_R = TypeVar("_R", SessionRecord, TurnRecord, TaskRecord)

_ENCODER = msgspec.json.Encoder()
_DECODERS = {kind: msgspec.json.Decoder(kind) for kind in (SessionRecord, TurnRecord, TaskRecord)}


def _copy(record: _R) -> _R:
    return _DECODERS[type(record)].decode(_ENCODER.encode(record))  # type: ignore[no-any-return]


def _turn_order(turn: TurnRecord) -> tuple[int, str]:
    return (turn.first_seq, turn.turn_id)


def _task_order(task: TaskRecord) -> tuple[float, str]:
    return (-task.status_ts, task.task_id)


class MemoryStore:
    """Sessions, turns and event batches in dicts; `open` and `close` do nothing."""

    def __init__(self) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._turns: dict[str, TurnRecord] = {}
        # session_id -> first_seq -> batch
        self._batches: dict[str, dict[int, StoredBatch]] = {}
        self._tasks: dict[str, TaskRecord] = {}
        self._generation = 0
        self._owners: dict[str, int] = {}  # turn_id -> the generation that wrote it

    async def open(self) -> None:
        self._generation += 1

    async def close(self) -> None:
        pass

    async def put_session(self, record: SessionRecord) -> None:
        self._sessions[record.session_id] = _copy(record)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        return None if record is None else _copy(record)

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0,
        front: str | None = None, status: str | None = None, q: str | None = None, visible: listing.Visible | None = None,
    ) -> tuple[list[SessionRecord], int]:  # fmt: skip
        matching = [
            s for s in self._sessions.values()
            if listing.matches(s, route=route, cwd=cwd, front=front, status=status, q=q, visible=visible)
        ]  # fmt: skip
        # Newest first, ties by session_id ascending: sort by id, then stably by time.
        matching.sort(key=lambda s: s.session_id)
        matching.sort(key=lambda s: s.updated_at, reverse=True)
        page = matching[offset : offset + limit]
        return [_copy(s) for s in page], len(matching)

    async def count_sessions(self, *, visible: listing.Visible | None = None) -> dict[str, dict[str, int]]:
        return listing.fold_counts(
            (s.route, s.front, s.turn_count, s.last_stop, s.last_cut, 1) for s in self._sessions.values()
            if visible is None or visible.shows(s.route, owner_of(s.meta))
        )  # fmt: skip

    async def delete_session(self, session_id: str) -> bool:
        self._batches.pop(session_id, None)
        for turn_id in [t.turn_id for t in self._turns.values() if t.session_id == session_id]:
            del self._turns[turn_id]
        for task_id in [t.task_id for t in self._tasks.values() if t.session_id == session_id]:
            del self._tasks[task_id]
        return self._sessions.pop(session_id, None) is not None

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        record = self._turns.get(turn_id)
        return None if record is None else _copy(record)

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, before_seq: int | None = None, limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TurnRecord]:  # fmt: skip
        turns = sorted(
            (t for t in self._turns.values()
             if t.session_id == session_id and t.first_seq > after_seq and (before_seq is None or t.first_seq < before_seq)),
            key=_turn_order, reverse=newest_first,
        )  # fmt: skip
        return [_copy(t) for t in turns[:limit]]

    async def turn_at_stream_seq(self, session_id: str, stream_seq: int) -> TurnRecord | None:
        found = [
            t for t in self._turns.values()
            if t.session_id == session_id and t.stream_seq is not None and t.stream_seq <= stream_seq
        ]  # fmt: skip
        return _copy(max(found, key=lambda t: (t.stream_seq, t.first_seq))) if found else None

    async def set_stream_seqs(self, session_id: str, marks: dict[str, int]) -> None:
        for turn_id, seq in marks.items():
            turn = self._turns.get(turn_id)
            if turn is not None and turn.session_id == session_id:
                turn.stream_seq = seq

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        if batch is not None and batch.first_seq in self._batches.get(session.session_id, {}):
            raise InternalError(f"batch {session.session_id}@{batch.first_seq} is already stored")  # nothing written
        stored = self._sessions.get(session.session_id)
        kept = dict(stored.states) if stored is not None else {}
        record = _copy(session)
        for key in states:
            if key in record.states:
                kept[key] = record.states[key]
            else:
                kept.pop(key, None)
        record.states = kept
        self._sessions[session.session_id] = record
        for turn in turns:
            self._turns[turn.turn_id] = _copy(turn)
            self._owners[turn.turn_id] = self._generation
        for task in tasks:
            self._tasks[task.task_id] = _copy(task)
        if batch is not None:
            self._batches.setdefault(session.session_id, {})[batch.first_seq] = batch

    async def read_batches(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None, limit: int | None = None
    ) -> list[StoredBatch]:
        batches = self._batches.get(session_id, {})
        found = [
            batches[k] for k in sorted(batches)
            if batches[k].last_seq > after_seq and (through_seq is None or batches[k].first_seq <= through_seq)
        ]  # fmt: skip
        return found[:limit]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        task = self._tasks.get(task_id)
        return None if task is None else _copy(task)

    async def list_tasks(
        self, *, route: str, context_id: str | None = None, state: str | None = None, after_ts: float | None = None,
        limit: int = 50, cursor: tuple[float, str] | None = None, visible: listing.Visible | None = None,
    ) -> TaskPage:  # fmt: skip
        matching = sorted(
            (t for t in self._tasks.values()
             if t.route == route and (context_id is None or t.context_id == context_id)
             and (state is None or t.state == state) and (after_ts is None or t.status_ts > after_ts)
             and (visible is None or self._shows(visible, t))),
            key=_task_order,
        )  # fmt: skip
        rest = matching if cursor is None else [t for t in matching if _task_order(t) > (-cursor[0], cursor[1])]
        page = rest[:limit]
        more = len(rest) > limit
        return TaskPage(
            tasks=[_copy(t) for t in page], total=len(matching),
            next=(page[-1].status_ts, page[-1].task_id) if more and page else None,
        )

    def _shows(self, visible: listing.Visible, task: TaskRecord) -> bool:
        session = self._sessions.get(task.session_id)
        return session is not None and visible.shows(session.route, owner_of(session.meta))

    async def close_cut_turns(self) -> list[TurnRecord]:
        closed: list[TurnRecord] = []
        for turn in sorted(self._turns.values(), key=_turn_order):
            if turn.ended_at is not None or self._owners.get(turn.turn_id) == self._generation:
                continue
            session = self._sessions.get(turn.session_id)
            if session is None:
                continue
            record, batch = cut_turn_end(turn, session)
            session.last_seq = batch.last_seq
            self._turns[turn.turn_id] = record
            self._batches.setdefault(session.session_id, {})[batch.first_seq] = batch
            for task in self._tasks.values():
                if task.turn_id == turn.turn_id:
                    task.state, task.status_ts = CUT_TASK_STATE, record.ended_at or task.status_ts
            closed.append(_copy(record))
        return closed

    async def stats(self) -> StoreStats:
        return StoreStats(
            sessions=len(self._sessions), turns=len(self._turns),
            open_turns=sum(1 for t in self._turns.values() if t.ended_at is None),
            events=sum(s.last_seq for s in self._sessions.values()),
            batches=sum(len(b) for b in self._batches.values()), tasks=len(self._tasks),
        )  # fmt: skip

    def _prunable(self, session_id: str, before_ts: float) -> bool:
        session = self._sessions.get(session_id)
        return (
            session is not None and session.updated_at < before_ts
            and not any(t.session_id == session_id and t.ended_at is None for t in self._turns.values())
        )  # fmt: skip

    async def prunable(
        self, before_ts: float, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[float, str]]:
        # Oldest first, ties by session_id descending (as the SQLite index gives them).
        found = sorted(
            ((s.updated_at, s.session_id) for s in self._sessions.values() if self._prunable(s.session_id, before_ts)),
            key=lambda pair: pair[1], reverse=True,
        )  # fmt: skip
        found.sort(key=lambda pair: pair[0])  # stable: ties keep the id order
        if after is not None:
            found = [p for p in found if p[0] > after[0] or (p[0] == after[0] and p[1] < after[1])]
        return found[:limit]

    async def prune(self, session_ids: Sequence[str], *, before_ts: float) -> list[str]:
        gone = [sid for sid in dict.fromkeys(session_ids) if self._prunable(sid, before_ts)]
        for sid in gone:
            await self.delete_session(sid)
        return gone

    async def vacuum(self) -> bool:
        return True
