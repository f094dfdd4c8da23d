"""The daemon's `Store`: one SQLite file, `bridge.sqlite3`, in the state directory.

Stdlib sqlite3 in WAL mode. Every blocking call runs in a worker thread through
`trio.to_thread.run_sync`, on one connection serialized by a `trio.Lock`. Several
agent-bridge processes may share a state directory (two editors), so writers take
the write lock up front (`BEGIN IMMEDIATE`) and wait up to `busy_timeout` for it.

The schema version is `PRAGMA user_version`; `_MIGRATIONS[n]` takes a database from
version n to n + 1, so a later schema adds one entry and never edits an old one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import trio

from bridge.errors import ConfigError, InternalError
from bridge.store.base import SessionRecord, StoredBatch, TurnRecord

__all__ = ["DB_FILENAME", "SCHEMA_VERSION", "SqliteStore"]

DB_FILENAME = "bridge.sqlite3"
_BUSY_TIMEOUT_MS = 5000

_T = TypeVar("_T")

_JSON_ENCODER = msgspec.json.Encoder()
_OPTIONS_DECODER = msgspec.json.Decoder(dict[str, str])
_META_DECODER = msgspec.json.Decoder(dict[str, object])

# One tuple of statements per version step; executescript() is avoided because it
# would COMMIT the transaction the migration runs in.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the first schema.
    (
        """CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            route      TEXT NOT NULL,
            cwd        TEXT NOT NULL,
            title      TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            back_ref   TEXT,
            options    TEXT NOT NULL,  -- JSON object
            meta       TEXT NOT NULL,  -- JSON object
            last_seq   INTEGER NOT NULL,
            closed     INTEGER NOT NULL
        )""",
        "CREATE INDEX sessions_by_update ON sessions (updated_at DESC, session_id)",
        """CREATE TABLE turns (
            turn_id     TEXT PRIMARY KEY,
            session_id  TEXT NOT NULL,
            started_at  REAL NOT NULL,
            first_seq   INTEGER NOT NULL,
            ended_at    REAL,
            last_seq    INTEGER,
            stop_reason TEXT,
            error       TEXT,
            meta        TEXT NOT NULL  -- JSON object
        )""",
        "CREATE INDEX turns_by_session ON turns (session_id)",
        """CREATE TABLE events (
            session_id TEXT NOT NULL,
            first_seq  INTEGER NOT NULL,
            last_seq   INTEGER NOT NULL,
            blob       BLOB NOT NULL,
            PRIMARY KEY (session_id, first_seq)
        )""",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_SESSION_COLUMNS = (
    "session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed"
)
_TURN_COLUMNS = "turn_id, session_id, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta"


def _json(value: dict[str, Any]) -> str:
    return _JSON_ENCODER.encode(value).decode()


def _session_row(r: SessionRecord) -> tuple[Any, ...]:
    return (
        r.session_id, r.route, r.cwd, r.title, r.created_at, r.updated_at, r.back_ref,
        _json(r.options), _json(r.meta), r.last_seq, int(r.closed),
    )  # fmt: skip


def _session_record(row: tuple[Any, ...]) -> SessionRecord:
    sid, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed = row
    return SessionRecord(
        session_id=sid, route=route, cwd=cwd, title=title, created_at=created_at, updated_at=updated_at,
        back_ref=back_ref, options=_OPTIONS_DECODER.decode(options), meta=_META_DECODER.decode(meta),
        last_seq=last_seq, closed=bool(closed),
    )  # fmt: skip


def _turn_row(r: TurnRecord) -> tuple[Any, ...]:
    return (
        r.turn_id, r.session_id, r.started_at, r.first_seq, r.ended_at, r.last_seq,
        r.stop_reason, r.error, _json(r.meta),
    )  # fmt: skip


def _turn_record(row: tuple[Any, ...]) -> TurnRecord:
    turn_id, sid, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta = row
    return TurnRecord(
        turn_id=turn_id, session_id=sid, started_at=started_at, first_seq=first_seq, ended_at=ended_at,
        last_seq=last_seq, stop_reason=stop_reason, error=error, meta=_META_DECODER.decode(meta),
    )  # fmt: skip


def _write(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    """Run `body` in one write transaction. IMMEDIATE takes the write lock now, where
    `busy_timeout` applies; a deferred read-then-write could fail at once with BUSY."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def _read(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    """Run `body` in one read transaction: one snapshot even while others write."""
    conn.execute("BEGIN")
    try:
        return body(conn)
    finally:
        conn.execute("COMMIT")


def _connect(state_dir: str) -> sqlite3.Connection:
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    # isolation_level=None: no implicit transactions; `_write`/`_read` open them.
    conn = sqlite3.connect(os.path.join(state_dir, DB_FILENAME), isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        # Survives kill -9: a commit is in the WAL file (OS page cache) before COMMIT returns;
        # only power loss or an OS crash can drop the last commits, never corrupt the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        _write(conn, _migrate)
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise ConfigError([f"state: schema version {version} is newer than this agent-bridge ({SCHEMA_VERSION})"])
    for step in _MIGRATIONS[version:]:
        for statement in step:
            conn.execute(statement)
    # user_version lives in the database header and is written inside this transaction.
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class SqliteStore:
    """The `Store` of `bridge.store.base` on `<state_dir>/bridge.sqlite3`."""

    def __init__(self, state_dir: str) -> None:
        self._state_dir = state_dir
        self._conn: sqlite3.Connection | None = None
        self._lock = trio.Lock()

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        async with self._lock:
            if self._conn is None:
                raise InternalError("the store is not open")
            try:
                # abandon_on_cancel=False: a cancelled caller waits for the thread, so a
                # transaction is never left half-run on a connection others will use.
                return await trio.to_thread.run_sync(fn, self._conn, abandon_on_cancel=False)
            except sqlite3.Error as exc:
                raise InternalError(f"sqlite: {exc}") from exc

    async def open(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            try:
                self._conn = await trio.to_thread.run_sync(_connect, self._state_dir, abandon_on_cancel=False)
            except (sqlite3.Error, OSError) as exc:
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc}") from exc

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                # Forgotten only once closed: a close cancelled before it ran can be retried.
                await trio.to_thread.run_sync(self._conn.close, abandon_on_cancel=False)
                self._conn = None

    async def put_session(self, record: SessionRecord) -> None:
        row = _session_row(record)
        sql = f"INSERT OR REPLACE INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
        await self._run(lambda c: c.execute(sql, row))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?"
        row = await self._run(lambda c: c.execute(sql, (session_id,)).fetchone())
        return None if row is None else _session_record(row)

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0
    ) -> tuple[list[SessionRecord], int]:
        clauses: list[str] = []
        params: list[object] = []
        if route is not None:
            clauses.append("route = ?")
            params.append(route)
        if cwd is not None:
            clauses.append("cwd = ?")
            params.append(cwd)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        count_sql = f"SELECT COUNT(*) FROM sessions {where}"
        page_sql = (
            f"SELECT {_SESSION_COLUMNS} FROM sessions {where} "
            "ORDER BY updated_at DESC, session_id LIMIT ? OFFSET ?"
        )

        def body(c: sqlite3.Connection) -> tuple[list[Any], int]:
            (total,) = c.execute(count_sql, params).fetchone()
            return c.execute(page_sql, [*params, limit, offset]).fetchall(), total

        rows, total = await self._run(lambda c: _read(c, body))
        return [_session_record(r) for r in rows], total

    async def delete_session(self, session_id: str) -> bool:
        def body(c: sqlite3.Connection) -> bool:
            c.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
            return c.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)).rowcount > 0

        return await self._run(lambda c: _write(c, body))

    async def put_turn(self, record: TurnRecord) -> None:
        row = _turn_row(record)
        sql = f"INSERT OR REPLACE INTO turns ({_TURN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"
        await self._run(lambda c: c.execute(sql, row))

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        sql = f"SELECT {_TURN_COLUMNS} FROM turns WHERE turn_id = ?"
        row = await self._run(lambda c: c.execute(sql, (turn_id,)).fetchone())
        return None if row is None else _turn_record(row)

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        sql = f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY started_at, first_seq, turn_id"
        rows = await self._run(lambda c: c.execute(sql, (session_id,)).fetchall())
        return [_turn_record(r) for r in rows]

    async def append_batch(self, session_id: str, batch: StoredBatch, *, last_seq: int, updated_at: float) -> None:
        def body(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO events (session_id, first_seq, last_seq, blob) VALUES (?,?,?,?)",
                (session_id, batch.first_seq, batch.last_seq, batch.blob),
            )
            c.execute(
                "UPDATE sessions SET last_seq = ?, updated_at = ? WHERE session_id = ?",
                (last_seq, updated_at, session_id),
            )

        await self._run(lambda c: _write(c, body))

    async def read_batches(self, session_id: str, *, after_seq: int = 0) -> list[StoredBatch]:
        sql = (
            "SELECT first_seq, last_seq, blob FROM events WHERE session_id = ? AND last_seq > ? ORDER BY first_seq"
        )
        rows = await self._run(lambda c: c.execute(sql, (session_id, after_seq)).fetchall())
        return [StoredBatch(first_seq=f, last_seq=l, blob=b) for f, l, b in rows]
