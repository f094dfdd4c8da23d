"""The daemon's `Store`: one SQLite file, `bridge.sqlite3`, in the state directory.

Stdlib sqlite3 in WAL mode, one connection, used by one thread of the store's own.
Calls are queued and run in batches, each batch one transaction: group commit, see
`SqliteStore`. Several agent-bridge processes may share a state directory
(two editors), so a batch that writes takes the write lock up front (`BEGIN
IMMEDIATE`) and waits up to `busy_timeout` for it.

Owners (who may close a cut turn, bridge/store/base.py): each open store claims
one (bridge/store/owners.py) and names it in every turn row it writes.

The schema version is `PRAGMA user_version`; `_MIGRATIONS[n]` takes a database from
version n to n + 1, so a later schema adds one entry and never edits an old one.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import trio

from bridge.errors import ConfigError, InternalError
from bridge.store.base import CUT_TASK_STATE, SessionRecord, StoredBatch, TaskPage, TaskRecord, TurnRecord, cut_turn_end
from bridge.store.owners import claim_owner, release_owner, sweep_owners, take_gone_owner

__all__ = ["DB_FILENAME", "SCHEMA_VERSION", "SqliteStore"]

DB_FILENAME = "bridge.sqlite3"
_BUSY_TIMEOUT_MS = 5000

_T = TypeVar("_T")

_JSON_ENCODER = msgspec.json.Encoder()
_OPTIONS_DECODER = msgspec.json.Decoder(dict[str, str])
_META_DECODER = msgspec.json.Decoder(dict[str, object])
_STATE_DECODER = msgspec.json.Decoder(dict[str, object])

# One tuple of statements per version step; executescript() is avoided because it
# would COMMIT the transaction the migration runs in.
_MIGRATIONS: tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...] = (
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
    # 1 -> 2: the owner of each turn (who may close it when cut), and the open turns.
    (
        "ALTER TABLE turns ADD COLUMN owner TEXT",
        "CREATE INDEX turns_open ON turns (ended_at) WHERE ended_at IS NULL",
    ),
    # 2 -> 3: reads by index (issue 16). Turns by (session, first_seq) and by a front's
    # stream position; a summary on each session; each front's state in a row of its
    # own; A2A tasks as rows listed by status time. `_split_meta` moves what schema 2
    # kept in `sessions.meta` into these tables.
    (
        "ALTER TABLE turns ADD COLUMN stream_seq INTEGER",
        "DROP INDEX turns_by_session",
        "CREATE INDEX turns_by_session ON turns (session_id, first_seq)",
        "CREATE INDEX turns_by_stream ON turns (session_id, stream_seq) WHERE stream_seq IS NOT NULL",
        "ALTER TABLE sessions ADD COLUMN turn_count INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN last_stop TEXT",
        "ALTER TABLE sessions ADD COLUMN last_cut INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX sessions_by_route ON sessions (route, updated_at DESC, session_id)",
        """CREATE TABLE front_states (
            session_id TEXT NOT NULL,
            key        TEXT NOT NULL,
            data       TEXT NOT NULL,  -- JSON object
            PRIMARY KEY (session_id, key)
        )""",
        """CREATE TABLE tasks (
            task_id    TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            route      TEXT NOT NULL,
            context_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            turn_id    TEXT NOT NULL,
            state      TEXT NOT NULL,
            status_ts  REAL NOT NULL,
            data       TEXT NOT NULL  -- JSON object
        )""",
        "CREATE INDEX tasks_by_route ON tasks (route, status_ts DESC, task_id)",
        "CREATE INDEX tasks_by_context ON tasks (context_id, status_ts DESC, task_id)",
        "CREATE INDEX tasks_by_session ON tasks (session_id)",
        "CREATE INDEX tasks_by_turn ON tasks (turn_id)",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

_SESSION_COLUMNS = (
    "session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed,"
    " turn_count, last_stop, last_cut"
)
_TURN_COLUMNS = "turn_id, session_id, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta, stream_seq"
_TASK_COLUMNS = "task_id, session_id, route, context_id, created_at, turn_id, state, status_ts, data"
_PUT_SESSION = f"INSERT OR REPLACE INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_PUT_TURN = f"INSERT OR REPLACE INTO turns ({_TURN_COLUMNS}, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
_PUT_TASK = f"INSERT OR REPLACE INTO tasks ({_TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"
_PUT_STATE = "INSERT OR REPLACE INTO front_states (session_id, key, data) VALUES (?,?,?)"
_DROP_STATE = "DELETE FROM front_states WHERE session_id = ? AND key = ?"
_PUT_BATCH = "INSERT INTO events (session_id, first_seq, last_seq, blob) VALUES (?,?,?,?)"


def _json(value: dict[str, Any]) -> str:
    return _JSON_ENCODER.encode(value).decode()


def _session_row(r: SessionRecord) -> tuple[Any, ...]:
    return (
        r.session_id, r.route, r.cwd, r.title, r.created_at, r.updated_at, r.back_ref,
        _json(r.options), _json(r.meta), r.last_seq, int(r.closed), r.turn_count, r.last_stop, int(r.last_cut),
    )  # fmt: skip


def _session_record(row: tuple[Any, ...]) -> SessionRecord:
    sid, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed, turns, stop, cut = row
    return SessionRecord(
        session_id=sid, route=route, cwd=cwd, title=title, created_at=created_at, updated_at=updated_at,
        back_ref=back_ref, options=_OPTIONS_DECODER.decode(options), meta=_META_DECODER.decode(meta),
        last_seq=last_seq, closed=bool(closed), turn_count=turns, last_stop=stop, last_cut=bool(cut),
    )  # fmt: skip


def _with_states(c: sqlite3.Connection, records: list[SessionRecord]) -> list[SessionRecord]:
    """`records` with their `states`, read in one query."""
    if records:
        by_id = {r.session_id: r for r in records}
        marks = ",".join("?" * len(by_id))
        sql = f"SELECT session_id, key, data FROM front_states WHERE session_id IN ({marks})"
        for sid, key, data in c.execute(sql, list(by_id)):
            by_id[sid].states[key] = _STATE_DECODER.decode(data)
    return records


def _state_rows(r: SessionRecord, keys: Sequence[str]) -> tuple[list[tuple[Any, ...]], list[tuple[str, str]]]:
    """(rows to write, (session, key) to remove) for the states named."""
    put = [(r.session_id, k, _json(r.states[k])) for k in keys if k in r.states]
    drop = [(r.session_id, k) for k in keys if k not in r.states]
    return put, drop


def _turn_row(r: TurnRecord, owner: str | None) -> tuple[Any, ...]:
    return (
        r.turn_id, r.session_id, r.started_at, r.first_seq, r.ended_at, r.last_seq,
        r.stop_reason, r.error, _json(r.meta), r.stream_seq, owner,
    )  # fmt: skip


def _turn_record(row: tuple[Any, ...]) -> TurnRecord:
    turn_id, sid, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta, stream_seq = row
    return TurnRecord(
        turn_id=turn_id, session_id=sid, started_at=started_at, first_seq=first_seq, ended_at=ended_at,
        last_seq=last_seq, stop_reason=stop_reason, error=error, meta=_META_DECODER.decode(meta), stream_seq=stream_seq,
    )  # fmt: skip


def _task_row(r: TaskRecord) -> tuple[Any, ...]:
    return (r.task_id, r.session_id, r.route, r.context_id, r.created_at, r.turn_id, r.state, r.status_ts, _json(r.data))


def _task_record(row: tuple[Any, ...]) -> TaskRecord:
    task_id, sid, route, context_id, created_at, turn_id, state, status_ts, data = row
    return TaskRecord(
        task_id=task_id, session_id=sid, route=route, context_id=context_id, created_at=created_at,
        turn_id=turn_id, state=state, status_ts=status_ts, data=_META_DECODER.decode(data),
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


def _connect(state_dir: str) -> sqlite3.Connection:
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = os.path.join(state_dir, DB_FILENAME)
    # Transcripts and push credentials live here: owner only (issue 13, finding 11). The
    # file is made 0600 before SQLite opens it, and SQLite gives its -wal and -shm files
    # the database file's mode (os_unix.c, findCreateFileMode); no umask change, which
    # would reach every thread. An older store's files are narrowed too.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(name, 0o600)
    # isolation_level=None: no implicit transactions; `_write` and `_run_batch` open them.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        _set_wal(conn)
        # Survives kill -9: a commit is in the WAL file (OS page cache) before COMMIT returns;
        # only power loss or an OS crash can drop the last commits, never corrupt the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        _write(conn, _migrate)
    except BaseException:
        conn.close()
        raise
    return conn


def _set_wal(conn: sqlite3.Connection) -> None:
    """`journal_mode = WAL`, retried: while another process creates the same new
    database, this pragma can fail at once with "database is locked", without waiting
    for `busy_timeout` (seen on about one concurrent first open in fifteen)."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # in the store's opening thread, never the event loop


def _migrate(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise ConfigError([f"state: schema version {version} is newer than this agent-bridge ({SCHEMA_VERSION})"])
    for step in _MIGRATIONS[version:]:
        for statement in step:
            if callable(statement):
                statement(conn)
            else:
                conn.execute(statement)
    # user_version lives in the database header and is written inside this transaction.
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class _Op:
    """One store call waiting for the writer: its body, then its outcome."""

    __slots__ = ("fn", "write", "done", "result", "error")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], write: bool) -> None:
        self.fn, self.write = fn, write
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def _run_batch(conn: sqlite3.Connection, batch: list[_Op]) -> None:
    """Every call of `batch` in one transaction, each in its own savepoint, so one that
    fails is rolled back alone and the others still commit. An error that ends the whole
    transaction (busy, disk full) is every call's outcome."""
    conn.execute("BEGIN IMMEDIATE" if any(op.write for op in batch) else "BEGIN")
    try:
        if len(batch) == 1:  # alone: its failure is the transaction's
            batch[0].result = batch[0].fn(conn)
        else:
            for op in batch:
                conn.execute("SAVEPOINT op")
                try:
                    op.result = op.fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    op.error = exc
                conn.execute("RELEASE op")
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        for op in batch:
            op.result, op.error = None, exc
        if not isinstance(exc, Exception):
            raise


class SqliteStore:
    """The `Store` of `bridge.store.base` on `<state_dir>/bridge.sqlite3`.

    Group commit: one thread of the store's own runs the calls in batches. Calls made
    while a batch runs queue up, and the next batch runs them all in one transaction;
    every call still returns only once its transaction committed, so under load many
    calls share a commit and a thread hop. The thread hands a finished batch back to
    the event loop (`run_sync_soon`), which wakes its callers and sends the next.
    """

    def __init__(self, state_dir: str) -> None:
        self._state_dir = state_dir
        self._conn: sqlite3.Connection | None = None
        self._lock = trio.Lock()  # open and close
        self._queue: list[_Op] = []  # calls waiting for the next batch
        self._busy = False  # a batch is with the thread
        self._idle = trio.Event()
        self._idle.set()
        self._jobs: queue.SimpleQueue[list[_Op] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._owner: str | None = None  # this open store's owner id, and its locked file
        self._owner_fd = -1

    async def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool = True) -> _T:
        if self._conn is None:
            raise InternalError("the store is not open")
        op = _Op(fn, write)
        self._queue.append(op)
        if not self._busy:
            self._send_batch()
        # Shielded: a queued call always completes, so its outcome is never lost; a
        # cancelled caller sees its cancellation at its next checkpoint.
        with trio.CancelScope(shield=True):
            await op.done.wait()
        if op.error is not None:
            if isinstance(op.error, sqlite3.Error):
                raise InternalError(f"sqlite: {op.error}") from op.error
            raise op.error
        return op.result  # type: ignore[no-any-return]

    def _send_batch(self) -> None:
        batch, self._queue = self._queue, []
        self._busy = True
        if self._idle.is_set():
            self._idle = trio.Event()
        self._jobs.put(batch)

    def _batch_done(self, batch: list[_Op]) -> None:
        """In the event loop: the thread finished `batch`."""
        for op in batch:
            op.done.set()
        if self._queue:
            self._send_batch()
        else:
            self._busy = False
            self._idle.set()

    def _writer(self, conn: sqlite3.Connection, token: trio.lowlevel.TrioToken) -> None:
        """The store's thread: runs batches until told to close the connection."""
        while True:
            batch = self._jobs.get()
            if batch is None:
                conn.close()
                return
            with contextlib.suppress(BaseException):  # each call's outcome is in its _Op
                _run_batch(conn, batch)
            try:
                token.run_sync_soon(self._batch_done, batch)
            except trio.RunFinishedError:  # the loop is gone (a forced exit): nobody waits
                return

    async def open(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            try:
                conn = await trio.to_thread.run_sync(_connect, self._state_dir, abandon_on_cancel=False)
            except (sqlite3.Error, OSError) as exc:
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc}") from exc
            try:
                self._owner, self._owner_fd = claim_owner(self._state_dir)
            except OSError as exc:
                conn.close()
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc}") from exc
            self._thread = threading.Thread(
                target=self._writer, args=(conn, trio.lowlevel.current_trio_token()), name="bridge-store", daemon=True
            )
            self._thread.start()
            self._conn = conn

    async def close(self) -> None:
        async with self._lock:
            await self._idle.wait()
            if self._conn is not None and self._thread is not None:
                self._conn = None  # no new calls from now on
                self._jobs.put(None)
                await trio.to_thread.run_sync(self._thread.join, abandon_on_cancel=False)
                self._thread = None
            if self._owner is not None:
                release_owner(self._state_dir, self._owner, self._owner_fd)
                self._owner, self._owner_fd = None, -1

    async def put_session(self, record: SessionRecord) -> None:
        row = _session_row(record)
        put = [(record.session_id, k, _json(v)) for k, v in record.states.items()]

        def body(c: sqlite3.Connection) -> None:
            c.execute(_PUT_SESSION, row)
            c.execute("DELETE FROM front_states WHERE session_id = ?", (record.session_id,))
            c.executemany(_PUT_STATE, put)

        await self._run(body)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?"

        def body(c: sqlite3.Connection) -> SessionRecord | None:
            row = c.execute(sql, (session_id,)).fetchone()
            return None if row is None else _with_states(c, [_session_record(row)])[0]

        return await self._run(body, write=False)

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

        def body(c: sqlite3.Connection) -> tuple[list[SessionRecord], int]:
            (total,) = c.execute(count_sql, params).fetchone()
            rows = c.execute(page_sql, [*params, limit, offset]).fetchall()
            return _with_states(c, [_session_record(r) for r in rows]), total

        return await self._run(body, write=False)

    async def delete_session(self, session_id: str) -> bool:
        def body(c: sqlite3.Connection) -> bool:
            c.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM tasks WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM front_states WHERE session_id = ?", (session_id,))
            return c.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)).rowcount > 0

        return await self._run(body)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        sql = f"SELECT {_TURN_COLUMNS} FROM turns WHERE turn_id = ?"
        row = await self._run(lambda c: c.execute(sql, (turn_id,)).fetchone(), write=False)
        return None if row is None else _turn_record(row)

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, before_seq: int | None = None, limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TurnRecord]:  # fmt: skip
        sql = (
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? AND first_seq > ? AND first_seq < ? "
            f"ORDER BY first_seq {'DESC' if newest_first else 'ASC'} LIMIT ?"
        )
        params = (session_id, after_seq, 2**62 if before_seq is None else before_seq, -1 if limit is None else limit)
        rows = await self._run(lambda c: c.execute(sql, params).fetchall(), write=False)
        return [_turn_record(r) for r in rows]

    async def turn_at_stream_seq(self, session_id: str, stream_seq: int) -> TurnRecord | None:
        sql = (
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? AND stream_seq IS NOT NULL AND stream_seq <= ? "
            "ORDER BY stream_seq DESC, first_seq DESC LIMIT 1"
        )
        row = await self._run(lambda c: c.execute(sql, (session_id, stream_seq)).fetchone(), write=False)
        return None if row is None else _turn_record(row)

    async def set_stream_seqs(self, session_id: str, marks: dict[str, int]) -> None:
        rows = [(seq, turn_id, session_id) for turn_id, seq in marks.items()]
        await self._run(lambda c: c.executemany("UPDATE turns SET stream_seq = ? WHERE turn_id = ? AND session_id = ?", rows))

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        session_row = _session_row(session)
        turn_rows = [_turn_row(t, self._owner) for t in turns]
        task_rows = [_task_row(t) for t in tasks]
        put_states, drop_states = _state_rows(session, states)
        batch_row = (session.session_id, batch.first_seq, batch.last_seq, batch.blob) if batch is not None else None

        def body(c: sqlite3.Connection) -> None:
            c.execute(_PUT_SESSION, session_row)
            c.executemany(_PUT_TURN, turn_rows)
            c.executemany(_PUT_TASK, task_rows)
            c.executemany(_PUT_STATE, put_states)
            c.executemany(_DROP_STATE, drop_states)
            if batch_row is not None:
                c.execute(_PUT_BATCH, batch_row)

        await self._run(body)

    async def read_batches(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None, limit: int | None = None
    ) -> list[StoredBatch]:
        # From the batch holding event after_seq + 1 (the last one starting at or before
        # it), by the primary key: never a scan of the batches before.
        sql = (
            "SELECT first_seq, last_seq, blob FROM events WHERE session_id = ? AND first_seq >= "
            "COALESCE((SELECT MAX(first_seq) FROM events WHERE session_id = ? AND first_seq <= ?), 0) "
            "AND last_seq > ? AND first_seq <= ? ORDER BY first_seq LIMIT ?"
        )
        params = (
            session_id, session_id, after_seq + 1, after_seq, 2**62 if through_seq is None else through_seq,
            -1 if limit is None else limit,
        )  # fmt: skip
        rows = await self._run(lambda c: c.execute(sql, params).fetchall(), write=False)
        return [StoredBatch(first_seq=f, last_seq=l, blob=b) for f, l, b in rows]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        sql = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = ?"
        row = await self._run(lambda c: c.execute(sql, (task_id,)).fetchone(), write=False)
        return None if row is None else _task_record(row)

    async def list_tasks(
        self, *, route: str, context_id: str | None = None, state: str | None = None, after_ts: float | None = None,
        limit: int = 50, cursor: tuple[float, str] | None = None,
    ) -> TaskPage:  # fmt: skip
        clauses: list[str] = ["route = ?"]
        params: list[Any] = [route]
        if context_id is not None:
            clauses.append("context_id = ?")
            params.append(context_id)
        if state is not None:
            clauses.append("state = ?")
            params.append(state)
        if after_ts is not None:
            clauses.append("status_ts > ?")
            params.append(after_ts)
        where = " AND ".join(clauses)
        count_sql = f"SELECT COUNT(*) FROM tasks WHERE {where}"
        page_where, page_params = where, list(params)
        if cursor is not None:  # keyset: after the last task of the page before
            page_where += " AND (status_ts < ? OR (status_ts = ? AND task_id > ?))"
            page_params += [cursor[0], cursor[0], cursor[1]]
        page_sql = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {page_where} ORDER BY status_ts DESC, task_id LIMIT ?"

        def body(c: sqlite3.Connection) -> TaskPage:
            (total,) = c.execute(count_sql, params).fetchone()
            rows = [_task_record(r) for r in c.execute(page_sql, [*page_params, limit + 1]).fetchall()]
            more = len(rows) > limit
            rows = rows[:limit]
            return TaskPage(tasks=rows, total=total, next=(rows[-1].status_ts, rows[-1].task_id) if more else None)

        return await self._run(body, write=False)

    async def close_cut_turns(self) -> list[TurnRecord]:
        me, state_dir = self._owner, self._state_dir
        taken: dict[str, int] = {}  # gone owners whose files we hold locked

        def body(c: sqlite3.Connection) -> list[TurnRecord]:
            rows = c.execute(
                f"SELECT {_TURN_COLUMNS}, owner FROM turns WHERE ended_at IS NULL ORDER BY started_at, first_seq"
            ).fetchall()
            gone: dict[str | None, bool] = {}
            closed: list[TurnRecord] = []
            for row in rows:
                owner = row[-1]
                if owner == me:
                    continue
                if owner not in gone:
                    fd = take_gone_owner(state_dir, owner)
                    gone[owner] = fd is not None
                    if fd is not None and fd >= 0:
                        taken[owner] = fd
                if not gone[owner]:
                    continue  # another process runs it now
                turn = _turn_record(row[:-1])
                found = c.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (turn.session_id,)).fetchone()
                if found is None:
                    continue
                session = _session_record(found)
                (stored,) = c.execute("SELECT MAX(last_seq) FROM events WHERE session_id = ?", (turn.session_id,)).fetchone()
                session.last_seq = max(session.last_seq, stored or 0)
                record, batch = cut_turn_end(turn, session)
                session.last_seq = batch.last_seq
                c.execute(_PUT_SESSION, _session_row(session))
                c.execute(_PUT_TURN, _turn_row(record, owner))
                c.execute(_PUT_BATCH, (session.session_id, batch.first_seq, batch.last_seq, batch.blob))
                c.execute("UPDATE tasks SET state = ?, status_ts = ? WHERE turn_id = ?", (CUT_TASK_STATE, record.ended_at, record.turn_id))
                closed.append(record)
            return closed

        try:
            return await self._run(body)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(sweep_owners, state_dir, me, taken, abandon_on_cancel=False)
