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

from bridge.errors import InternalError
from bridge.store.base import SessionRecord, StoredBatch, TurnRecord, cut_turn_end

__all__ = ["MemoryStore"]

_R = TypeVar("_R", SessionRecord, TurnRecord)

_ENCODER = msgspec.json.Encoder()
_SESSION_DECODER = msgspec.json.Decoder(SessionRecord)
_TURN_DECODER = msgspec.json.Decoder(TurnRecord)


def _copy(record: _R) -> _R:
    decoder = _SESSION_DECODER if isinstance(record, SessionRecord) else _TURN_DECODER
    return decoder.decode(_ENCODER.encode(record))


def _turn_order(turn: TurnRecord) -> tuple[float, int, str]:
    return (turn.started_at, turn.first_seq, turn.turn_id)


class MemoryStore:
    """Sessions, turns and event batches in dicts; `open` and `close` do nothing."""

    def __init__(self) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._turns: dict[str, TurnRecord] = {}
        # session_id -> first_seq -> batch
        self._batches: dict[str, dict[int, StoredBatch]] = {}
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
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0
    ) -> tuple[list[SessionRecord], int]:
        matching = [
            s
            for s in self._sessions.values()
            if (route is None or s.route == route) and (cwd is None or s.cwd == cwd)
        ]
        # Newest first, ties by session_id ascending: sort by id, then stably by time.
        matching.sort(key=lambda s: s.session_id)
        matching.sort(key=lambda s: s.updated_at, reverse=True)
        page = matching[offset : offset + limit]
        return [_copy(s) for s in page], len(matching)

    async def delete_session(self, session_id: str) -> bool:
        self._batches.pop(session_id, None)
        for turn_id in [t.turn_id for t in self._turns.values() if t.session_id == session_id]:
            del self._turns[turn_id]
        return self._sessions.pop(session_id, None) is not None

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        record = self._turns.get(turn_id)
        return None if record is None else _copy(record)

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        turns = sorted((t for t in self._turns.values() if t.session_id == session_id), key=_turn_order)
        return [_copy(t) for t in turns]

    async def save(self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None) -> None:
        if batch is not None and batch.first_seq in self._batches.get(session.session_id, {}):
            raise InternalError(f"batch {session.session_id}@{batch.first_seq} is already stored")  # nothing written
        self._sessions[session.session_id] = _copy(session)
        for turn in turns:
            self._turns[turn.turn_id] = _copy(turn)
            self._owners[turn.turn_id] = self._generation
        if batch is not None:
            self._batches.setdefault(session.session_id, {})[batch.first_seq] = batch

    async def read_batches(self, session_id: str, *, after_seq: int = 0) -> list[StoredBatch]:
        batches = self._batches.get(session_id, {})
        return [batches[k] for k in sorted(batches) if batches[k].last_seq > after_seq]

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
            closed.append(_copy(record))
        return closed
