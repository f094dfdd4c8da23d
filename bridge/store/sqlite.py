"""The daemon's `Store`: one SQLite file, `bridge.sqlite3`, in the state directory.

Stdlib sqlite3 in WAL mode, one connection (bridge/store/sqlite_conn.py), used by one
thread of the store's own. Calls are queued and run in batches, each batch one
transaction: group commit, see `SqliteStore`. Several agent-bridge processes may share
a state directory (two editors, or the daemon and an operator's `agent-bridge store`),
so a batch that writes takes the write lock up front (`BEGIN IMMEDIATE`) and waits up
to `busy_timeout` for it.

Owners (who may close a cut turn, bridge/store/base.py): each open store claims
one (bridge/store/owners.py) and names it in every turn row it writes.

The schema and its migrations are in bridge/store/sqlite_schema.py: opening a file of
an older schema converts it in place, in one transaction. Rows and statements are in
bridge/store/sqlite_rows.py, operators' work (stats, prune, VACUUM) in sqlite_ops.py.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import trio

from bridge.errors import InternalError, Overloaded
from bridge.store import listing, sqlite_ops
from bridge.store.base import (
    CUT_TASK_STATE, SessionRecord, StoredBatch, StoreStats, TaskPage, TaskRecord, TurnRecord, cut_turn_end,
)  # fmt: skip
from bridge.store.owners import claim_owner, release_owner, sweep_owners, take_gone_owner
from bridge.store.sqlite_conn import DB_FILENAME, Op, connect, is_busy, run_batch
from bridge.store.sqlite_rows import (
    DROP_STATE, PUT_BATCH, PUT_SESSION, PUT_STATE, PUT_TASK, PUT_TURN, SESSION_COLUMNS, TASK_COLUMNS, TURN_COLUMNS,
    json_text, session_record, session_row, state_rows, task_record, task_row, turn_record, turn_row, with_states,
)  # fmt: skip
from bridge.store.sqlite_schema import SCHEMA_VERSION

__all__ = ["DB_FILENAME", "SCHEMA_VERSION", "SqliteStore"]

_T = TypeVar("_T")


def _filters(*pairs: tuple[str, object]) -> tuple[list[str], list[object]]:
    """The WHERE clauses (constant SQL) and parameters of the filters whose value is given."""
    given = [(clause, value) for clause, value in pairs if value is not None]
    return [clause for clause, _ in given], [value for _, value in given]


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
        self._queue: list[Op] = []  # calls waiting for the next batch
        self._busy = False  # a batch is with the thread
        self._idle = trio.Event()
        self._idle.set()
        self._jobs: queue.SimpleQueue[list[Op] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._owner: str | None = None  # this open store's owner id, and its locked file
        self._owner_fd = -1

    async def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool = True, bare: bool = False) -> _T:
        if self._conn is None:
            raise InternalError("the store is not open")
        op = Op(fn, write, bare)
        self._queue.append(op)
        if not self._busy:
            self._send_batch()
        # Shielded: a queued call always completes, so its outcome is never lost; a
        # cancelled caller sees its cancellation at its next checkpoint.
        with trio.CancelScope(shield=True):
            await op.done.wait()
        if op.error is not None:
            if isinstance(op.error, sqlite3.Error):
                if is_busy(op.error):
                    raise Overloaded(f"the store is busy (another process holds its write lock: {op.error}); try again") from op.error
                raise InternalError(f"sqlite: {op.error}") from op.error
            raise op.error
        return op.result  # type: ignore[no-any-return]

    def _send_batch(self) -> None:
        # Everything queued, up to a bare call (which goes alone, outside a transaction).
        cut = next((i for i, op in enumerate(self._queue) if op.bare), len(self._queue))
        cut = max(cut, 1)
        batch, self._queue = self._queue[:cut], self._queue[cut:]
        self._busy = True
        if self._idle.is_set():
            self._idle = trio.Event()
        self._jobs.put(batch)

    def _batch_done(self, batch: list[Op]) -> None:
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
            with contextlib.suppress(BaseException):  # each call's outcome is in its Op
                run_batch(conn, batch)
            try:
                token.run_sync_soon(self._batch_done, batch)
            except trio.RunFinishedError:  # the loop is gone (a forced exit): nobody waits
                return

    async def open(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            try:
                conn = await trio.to_thread.run_sync(connect, self._state_dir, abandon_on_cancel=False)
            except sqlite3.Error as exc:
                if is_busy(exc):
                    raise Overloaded(f"the store in {self._state_dir} is busy (another process holds it: {exc}); try again") from exc
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc}") from exc
            except OSError as exc:
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc}") from exc
            except InternalError as exc:  # a migration that failed (the file is as it was)
                raise InternalError(f"cannot open the store in {self._state_dir}: {exc.message}") from exc
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
        row = session_row(record)
        put = [(record.session_id, k, json_text(v)) for k, v in record.states.items()]

        def body(c: sqlite3.Connection) -> None:
            c.execute(PUT_SESSION, row)
            c.execute("DELETE FROM front_states WHERE session_id = ?", (record.session_id,))
            c.executemany(PUT_STATE, put)

        await self._run(body)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?"

        def body(c: sqlite3.Connection) -> SessionRecord | None:
            row = c.execute(sql, (session_id,)).fetchone()
            return None if row is None else with_states(c, [session_record(row)])[0]

        return await self._run(body, write=False)

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0,
        front: str | None = None, status: str | None = None, q: str | None = None, visible: listing.Visible | None = None,
    ) -> tuple[list[SessionRecord], int]:  # fmt: skip
        where, params = listing.where("sqlite", route=route, cwd=cwd, front=front, status=status, q=q, visible=visible)
        count_sql = f"SELECT COUNT(*) FROM sessions {where}"
        page_sql = f"SELECT {SESSION_COLUMNS} FROM sessions {where} ORDER BY updated_at DESC, session_id LIMIT ? OFFSET ?"

        def body(c: sqlite3.Connection) -> tuple[list[SessionRecord], int]:
            (total,) = c.execute(count_sql, params).fetchone()
            rows = c.execute(page_sql, [*params, limit, offset]).fetchall()
            return with_states(c, [session_record(r) for r in rows]), total

        return await self._run(body, write=False)

    async def count_sessions(self, *, visible: listing.Visible | None = None) -> dict[str, dict[str, int]]:
        sql, params = listing.count_sql("sqlite", visible)
        return await self._run(lambda c: listing.fold_counts(c.execute(sql, params).fetchall()), write=False)

    async def delete_session(self, session_id: str) -> bool:
        return await self._run(lambda c: sqlite_ops.delete_sessions(c, [session_id]) > 0)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        sql = f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?"
        row = await self._run(lambda c: c.execute(sql, (turn_id,)).fetchone(), write=False)
        return None if row is None else turn_record(row)

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, before_seq: int | None = None, limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TurnRecord]:  # fmt: skip
        sql = (
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? AND first_seq > ? AND first_seq < ? "
            f"ORDER BY first_seq {'DESC' if newest_first else 'ASC'} LIMIT ?"
        )
        params = (session_id, after_seq, 2**62 if before_seq is None else before_seq, -1 if limit is None else limit)
        rows = await self._run(lambda c: c.execute(sql, params).fetchall(), write=False)
        return [turn_record(r) for r in rows]

    async def turn_at_stream_seq(self, session_id: str, stream_seq: int) -> TurnRecord | None:
        sql = (
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? AND stream_seq IS NOT NULL AND stream_seq <= ? "
            "ORDER BY stream_seq DESC, first_seq DESC LIMIT 1"
        )
        row = await self._run(lambda c: c.execute(sql, (session_id, stream_seq)).fetchone(), write=False)
        return None if row is None else turn_record(row)

    async def set_stream_seqs(self, session_id: str, marks: dict[str, int]) -> None:
        rows = [(seq, turn_id, session_id) for turn_id, seq in marks.items()]
        await self._run(lambda c: c.executemany("UPDATE turns SET stream_seq = ? WHERE turn_id = ? AND session_id = ?", rows))

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        row = session_row(session)
        turn_rows = [turn_row(t, self._owner) for t in turns]
        task_rows = [task_row(t) for t in tasks]
        put_states, drop_states = state_rows(session, states)
        batch_row = (session.session_id, batch.first_seq, batch.last_seq, batch.blob) if batch is not None else None

        def body(c: sqlite3.Connection) -> None:
            c.execute(PUT_SESSION, row)
            c.executemany(PUT_TURN, turn_rows)
            c.executemany(PUT_TASK, task_rows)
            c.executemany(PUT_STATE, put_states)
            c.executemany(DROP_STATE, drop_states)
            if batch_row is not None:
                c.execute(PUT_BATCH, batch_row)

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
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?"
        row = await self._run(lambda c: c.execute(sql, (task_id,)).fetchone(), write=False)
        return None if row is None else task_record(row)

    async def list_tasks(
        self, *, route: str, context_id: str | None = None, state: str | None = None, after_ts: float | None = None,
        limit: int = 50, cursor: tuple[float, str] | None = None, visible: listing.Visible | None = None,
    ) -> TaskPage:  # fmt: skip
        clauses, params = _filters(
            ("route = ?", route), ("context_id = ?", context_id), ("state = ?", state), ("status_ts > ?", after_ts)
        )
        if visible is not None:  # by its session's owner: one primary-key probe per task read
            cond, more = listing.visible_sql("sqlite", visible, "s")
            clauses.append(f"EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = tasks.session_id AND {cond})")
            params += more
        where = " AND ".join(clauses)
        count_sql = f"SELECT COUNT(*) FROM tasks WHERE {where}"
        page_where, page_params = where, list(params)
        if cursor is not None:  # keyset: after the last task of the page before
            page_where += " AND (status_ts < ? OR (status_ts = ? AND task_id > ?))"
            page_params += [cursor[0], cursor[0], cursor[1]]
        page_sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE {page_where} ORDER BY status_ts DESC, task_id LIMIT ?"

        def body(c: sqlite3.Connection) -> TaskPage:
            (total,) = c.execute(count_sql, params).fetchone()
            rows = [task_record(r) for r in c.execute(page_sql, [*page_params, limit + 1]).fetchall()]
            more = len(rows) > limit
            rows = rows[:limit]
            return TaskPage(tasks=rows, total=total, next=(rows[-1].status_ts, rows[-1].task_id) if more and rows else None)

        return await self._run(body, write=False)

    async def close_cut_turns(self) -> list[TurnRecord]:
        me, state_dir = self._owner, self._state_dir
        taken: dict[str, int] = {}  # gone owners whose files we hold locked

        def body(c: sqlite3.Connection) -> list[TurnRecord]:
            rows = c.execute(
                f"SELECT {TURN_COLUMNS}, owner FROM turns WHERE ended_at IS NULL ORDER BY started_at, first_seq"
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
                turn = turn_record(row[:-1])
                found = c.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (turn.session_id,)).fetchone()
                if found is None:
                    continue
                session = session_record(found)
                (stored,) = c.execute("SELECT MAX(last_seq) FROM events WHERE session_id = ?", (turn.session_id,)).fetchone()
                session.last_seq = max(session.last_seq, stored or 0)
                record, batch = cut_turn_end(turn, session)
                session.last_seq = batch.last_seq
                c.execute(PUT_SESSION, session_row(session))
                c.execute(PUT_TURN, turn_row(record, owner))
                c.execute(PUT_BATCH, (session.session_id, batch.first_seq, batch.last_seq, batch.blob))
                c.execute("UPDATE tasks SET state = ?, status_ts = ? WHERE turn_id = ?", (CUT_TASK_STATE, record.ended_at, record.turn_id))
                closed.append(record)
            return closed

        try:
            return await self._run(body)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(sweep_owners, state_dir, me, taken, abandon_on_cancel=False)

    async def stats(self) -> StoreStats:
        path = os.path.join(self._state_dir, DB_FILENAME)
        return await self._run(lambda c: sqlite_ops.stats(c, path), write=False)

    async def prunable(
        self, before_ts: float, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[float, str]]:
        return await self._run(lambda c: sqlite_ops.prunable(c, before_ts, limit, after), write=False)

    async def prune(self, session_ids: Sequence[str], *, before_ts: float) -> list[str]:
        ids = list(session_ids)
        return await self._run(lambda c: sqlite_ops.prune(c, ids, before_ts)) if ids else []

    async def vacuum(self) -> bool:
        return await self._run(sqlite_ops.vacuum, bare=True)
