"""The `Store` on PostgreSQL (`[store] url`): several daemons share one database (issue 17).

The same tables and behaviour as the SQLite store (bridge/store/sqlite.py), its schema
declared once for both (bridge/store/schema_ddl.py; PostgreSQL's own parts in
pg_schema.py). Each call is one transaction on a pooled connection in a worker thread
(pg_conn.py); most are one statement, one round trip: a flush (`save`) included, its
batch notified on the `bridge_events` channel in the same transaction, so instances
following the session read it as soon as it is committed (bridge/cluster/).

Owners (who may close a cut turn, bridge/store/base.py): each open store is an
*instance* with a row in `instances` naming its host and pid, which the cluster renews
(`heartbeat`) every third of `lease_ttl_s`; a turn whose owner's row is gone or expired
on the database's clock is cut (pg_ops.py). Statements and rows are in pg_rows.py.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio

from bridge.errors import BridgeError, InternalError
from bridge.logs import add_secret
from bridge.store import listing, pg_ops
from bridge.store.base import SessionRecord, StoredBatch, StoreStats, TaskPage, TaskRecord, TurnRecord
from bridge.store.pg_conn import STATEMENT_TIMEOUT_MS, Pool, password_of, redact
from bridge.store.pg_rows import (
    PUT_SESSION, SESSION_COLUMNS, SESSION_WITH_STATES, TASK_COLUMNS, TURN_COLUMNS, save_params, sessions_with_states,
    upsert,
)  # fmt: skip
from bridge.store.pg_schema import DB_NOW, ensure_schema
from bridge.store.sqlite import _filters
from bridge.store.sqlite_rows import json_text, session_row, task_record, turn_record

__all__ = ["PgStore"]

_T = TypeVar("_T")
_MAX_SEQ = 2**62

# The session row and all its states in one statement: the states it no longer has
# deleted, the others written (no key in both: one statement never touches a row twice).
_PUT_SESSION_STATES = (
    f"WITH s AS ({PUT_SESSION}), d AS (DELETE FROM front_states WHERE session_id = %s AND key <> ALL(%s::text[])) "
    + upsert("front_states", "session_id, key, data", "session_id, key", "SELECT %s, * FROM unnest(%s::text[], %s::text[])")
)  # arrays: a session is put whole once, when it is made
_REGISTER = (
    f"INSERT INTO instances (instance_id, started_at, expires_at, host, pid) VALUES (%s, {DB_NOW}, {DB_NOW} + %s, %s, %s) "
    f"ON CONFLICT (instance_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
)


class PgStore:
    """The `Store` of `bridge.store.base` on the PostgreSQL database at `url`."""

    def __init__(self, url: str, *, lease_ttl_s: float = 10.0, pool_size: int = 4) -> None:
        self.url = url  # for the cluster's own LISTEN connection; never shown (`redact`)
        self.owner = ""  # this open store's instance id (uuid hex), set at `open`
        self._lease_ttl_s = lease_ttl_s
        self._pool_size = pool_size
        self._pool: Pool | None = None
        self._lock = trio.Lock()  # open and close

    def __repr__(self) -> str:
        return f"PgStore({redact(self.url)!r}, owner={self.owner!r})"

    async def _run(self, fn: Callable[[Any], _T], *, tx: bool = False, abandon: bool = False) -> _T:
        if self._pool is None:
            raise InternalError("the store is not open")
        if not tx:
            return await self._pool.run(fn, abandon=abandon)

        def body(c: Any) -> _T:
            with c.transaction():
                return fn(c)

        return await self._pool.run(body, abandon=abandon)

    async def call(self, fn: Callable[[Any], _T], *, abandon: bool = False, atomic: bool = True) -> _T:
        """`fn(connection)` in a worker thread, in one transaction on a pooled connection:
        a race or a timeout, or a database that cannot be reached, is `Overloaded`.
        A cancelled caller waits for the call to end (its outcome is never lost), unless
        `abandon`: what a time bound must give up on (a probe, a renewal; `Pool._call`).
        `atomic=False`: each statement of `fn` commits on its own (no BEGIN and COMMIT
        round trips), for a call of one statement or of statements safe apart."""
        return await self._run(fn, tx=atomic, abandon=abandon)

    async def open(self) -> None:
        async with self._lock:
            if self._pool is not None:
                return
            add_secret(password_of(self.url))  # no log line shows it, whatever prints the URL
            pool = Pool(self.url, self._pool_size)
            owner = uuid.uuid4().hex
            register = (owner, self._lease_ttl_s, socket.gethostname(), os.getpid())

            def start(c: Any) -> None:
                ensure_schema(c)
                c.execute(_REGISTER, register)

            try:
                await pool.run(start)
            except BaseException:
                pool.close()
                raise
            self._pool, self.owner = pool, owner

    async def close(self) -> None:
        async with self._lock:
            if self._pool is None:
                return
            pool, owner = self._pool, self.owner
            try:
                with trio.CancelScope(shield=True):  # bounded by the connection's timeouts
                    await pool.run(lambda c: c.execute("DELETE FROM instances WHERE instance_id = %s", (owner,)))
            except BridgeError:
                pass  # the database is unreachable: the row expires by itself, and its turns are cut then
            finally:
                self._pool = None
                pool.close()

    async def heartbeat(self) -> None:
        """This instance's row expires `lease_ttl_s` from now on the database's clock.
        A cancelled caller does not wait for it (the cluster bounds its renewals)."""
        args = (self.owner, self._lease_ttl_s, socket.gethostname(), os.getpid())
        await self._run(lambda c: c.execute(_REGISTER, args), abandon=True)

    async def ping(self) -> float:
        """One round trip to the database, in seconds (`doctor`, `/readyz`); a cancelled
        caller does not wait for it (a probe's time bound holds)."""
        start = time.monotonic()
        await self._run(lambda c: c.execute("SELECT 1").fetchone(), abandon=True)
        return time.monotonic() - start

    async def put_session(self, record: SessionRecord) -> None:
        sid, keys = record.session_id, list(record.states)
        params = [*session_row(record), sid, keys, sid, keys, [json_text(v) for v in record.states.values()]]
        await self._run(lambda c: c.execute(_PUT_SESSION_STATES, params))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        sql = f"SELECT {SESSION_WITH_STATES} FROM sessions s LEFT JOIN front_states f USING (session_id) WHERE s.session_id = %s"
        rows = await self._run(lambda c: c.execute(sql, (session_id,)).fetchall())
        found = sessions_with_states(rows)
        return found[0] if found else None

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0,
        front: str | None = None, status: str | None = None, q: str | None = None, visible: listing.Visible | None = None,
    ) -> tuple[list[SessionRecord], int]:  # fmt: skip
        where, params = listing.where("pg", route=route, cwd=cwd, front=front, status=status, q=q, visible=visible)
        # One statement (one snapshot): the total beside the page, an empty page one row of NULLs.
        sql = (
            f"WITH s AS (SELECT {SESSION_COLUMNS} FROM sessions {where} ORDER BY updated_at DESC, session_id "
            f"LIMIT %s OFFSET %s) SELECT (SELECT COUNT(*) FROM sessions {where}), {SESSION_WITH_STATES} "
            "FROM (SELECT 1) one LEFT JOIN s ON true LEFT JOIN front_states f ON f.session_id = s.session_id "
            "ORDER BY s.updated_at DESC, s.session_id"
        )
        rows = await self._run(lambda c: c.execute(sql, [*params, limit, offset, *params]).fetchall())
        return sessions_with_states(rows, skip=1), rows[0][0]

    async def count_sessions(self, *, visible: listing.Visible | None = None) -> dict[str, dict[str, int]]:
        sql, params = listing.count_sql("pg", visible)
        return await self._run(lambda c: listing.fold_counts(c.execute(sql, params).fetchall()))

    async def delete_session(self, session_id: str) -> bool:
        return await self._run(lambda c: pg_ops.delete_sessions(c, [session_id]) > 0)

    async def get_turn(self, turn_id: str) -> TurnRecord | None:
        sql = f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = %s"
        row = await self._run(lambda c: c.execute(sql, (turn_id,)).fetchone())
        return None if row is None else turn_record(row)

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, before_seq: int | None = None, limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TurnRecord]:  # fmt: skip
        sql = (
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = %s AND first_seq > %s AND first_seq < %s "
            f"ORDER BY first_seq {'DESC' if newest_first else 'ASC'} LIMIT %s"
        )
        params = (session_id, after_seq, _MAX_SEQ if before_seq is None else before_seq, limit)
        rows = await self._run(lambda c: c.execute(sql, params).fetchall())
        return [turn_record(r) for r in rows]

    async def turn_at_stream_seq(self, session_id: str, stream_seq: int) -> TurnRecord | None:
        sql = (
            f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = %s AND stream_seq IS NOT NULL AND stream_seq <= %s "
            "ORDER BY stream_seq DESC, first_seq DESC LIMIT 1"
        )
        row = await self._run(lambda c: c.execute(sql, (session_id, stream_seq)).fetchone())
        return None if row is None else turn_record(row)

    async def set_stream_seqs(self, session_id: str, marks: dict[str, int]) -> None:
        sql = (
            "UPDATE turns t SET stream_seq = m.seq FROM unnest(%s::text[], %s::int8[]) AS m(turn_id, seq) "
            "WHERE t.turn_id = m.turn_id AND t.session_id = %s"
        )
        if marks:
            await self._run(lambda c: c.execute(sql, (list(marks), [int(v) for v in marks.values()], session_id)))

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        events = None if batch is None else (batch.first_seq, batch.last_seq, batch.blob)
        sql, params = save_params(session, turns, tasks, states, events, self.owner or None)
        if self._pool is None:
            raise InternalError("the store is not open")
        await self._pool.execute(sql, params)

    async def read_batches(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None, limit: int | None = None
    ) -> list[StoredBatch]:
        # From the batch holding event after_seq + 1 (the last one starting at or before
        # it), by the primary key: never a scan of the batches before.
        sql = (
            "SELECT first_seq, last_seq, blob FROM events WHERE session_id = %s AND first_seq >= "
            "COALESCE((SELECT MAX(first_seq) FROM events WHERE session_id = %s AND first_seq <= %s), 0) "
            "AND last_seq > %s AND first_seq <= %s ORDER BY first_seq LIMIT %s"
        )
        params = (session_id, session_id, after_seq + 1, after_seq, _MAX_SEQ if through_seq is None else through_seq, limit)
        rows = await self._run(lambda c: c.execute(sql, params).fetchall())
        return [StoredBatch(first_seq=f, last_seq=l, blob=bytes(b)) for f, l, b in rows]

    async def get_task(self, task_id: str) -> TaskRecord | None:
        sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = %s"
        row = await self._run(lambda c: c.execute(sql, (task_id,)).fetchone())
        return None if row is None else task_record(row)

    async def list_tasks(
        self, *, route: str, context_id: str | None = None, state: str | None = None, after_ts: float | None = None,
        limit: int = 50, cursor: tuple[float, str] | None = None, visible: listing.Visible | None = None,
    ) -> TaskPage:  # fmt: skip
        clauses, params = _filters(
            ("route = %s", route), ("context_id = %s", context_id), ("state = %s", state), ("status_ts > %s", after_ts)
        )
        if visible is not None:  # by its session's owner: one primary-key probe per task read
            cond, more = listing.visible_sql("pg", visible, "s")
            clauses.append(f"EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = tasks.session_id AND {cond})")
            params += more
        where = " AND ".join(clauses)
        page_where, page_params = where, list(params)
        if cursor is not None:  # keyset: after the last task of the page before (`<=`: a bound the index uses)
            page_where += " AND status_ts <= %s AND (status_ts < %s OR (status_ts = %s AND task_id > %s))"
            page_params += [cursor[0], cursor[0], cursor[0], cursor[1]]
        count_sql = f"SELECT COUNT(*) FROM tasks WHERE {where}"
        # The total beside each row of the page (computed once: an InitPlan), so a page
        # is one statement, read in the index's order; an empty page counts apart.
        page_sql = (
            f"SELECT ({count_sql}), {TASK_COLUMNS} FROM tasks WHERE {page_where} ORDER BY status_ts DESC, task_id LIMIT %s"
        )

        def body(c: Any) -> tuple[list[tuple[Any, ...]], int]:
            rows = c.execute(page_sql, [*params, *page_params, limit + 1]).fetchall()
            return rows, rows[0][0] if rows else c.execute(count_sql, params).fetchone()[0]

        rows, total = await self._run(body)
        found = [task_record(r[1:]) for r in rows]
        more = len(found) > limit
        found = found[:limit]
        return TaskPage(tasks=found, total=total, next=(found[-1].status_ts, found[-1].task_id) if more and found else None)

    async def close_cut_turns(self) -> list[TurnRecord]:
        me, ttl = self.owner, self._lease_ttl_s
        return await self._run(lambda c: pg_ops.close_cut_turns(c, me, ttl))

    async def stats(self) -> StoreStats:
        return await self._run(pg_ops.stats)

    async def prunable(
        self, before_ts: float, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[float, str]]:
        return await self._run(lambda c: pg_ops.prunable(c, before_ts, limit, after))

    async def prune(self, session_ids: Sequence[str], *, before_ts: float) -> list[str]:
        ids = list(session_ids)
        return await self._run(lambda c: pg_ops.prune(c, ids, before_ts)) if ids else []

    async def vacuum(self) -> bool:
        """`VACUUM` (outside a transaction; PostgreSQL refuses it inside one): dead rows'
        space is free for new rows; it never locks out the daemons' reads and writes."""

        def body(c: Any) -> bool:
            c.execute("SET statement_timeout = 0")  # it takes as long as the tables are big
            try:
                c.execute("VACUUM")
            finally:
                c.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            return True

        return await self._run(body)
