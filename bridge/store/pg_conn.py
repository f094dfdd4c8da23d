"""The PostgreSQL store's connections: a small pool, each call in a worker thread, and
what psycopg raises translated into the bridge's errors.

psycopg 3's synchronous API, each connection called from a thread of its own: its
async API runs on asyncio only, and the daemon runs on trio (as the SQLite store calls
sqlite3 from a thread of its own). At most `pool_size` calls are in flight, each on a
connection of its own; calls made meanwhile queue, and the store's flushes waiting
together go in one round trip (group commit, as the SQLite store's). A connection that
broke is closed and made again for the next call.

Nothing waits forever: connecting gives up after `CONNECT_TIMEOUT_S`, a statement after
`STATEMENT_TIMEOUT_MS` and a lock wait after `LOCK_TIMEOUT_MS` (PostgreSQL runtime
settings `statement_timeout`, `lock_timeout`), and TCP keepalives with
`tcp_user_timeout` notice a server that went away mid-call (libpq connection
parameters; a URL that sets them keeps its own).

The URL carries the password: no repr, log line or error shows it (`redact`).
"""

from __future__ import annotations

import queue
import re
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from bridge.errors import BridgeError, InternalError, Overloaded

__all__ = [
    "CONNECT_TIMEOUT_S", "LOCK_TIMEOUT_MS", "STATEMENT_TIMEOUT_MS", "Pool", "connect", "password_of", "redact", "translate",
]  # fmt: skip

_T = TypeVar("_T")

CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 10_000
# libpq connection parameters set unless the URL sets them (libpq docs, "Parameter Key Words").
_DEFAULTS = {
    "connect_timeout": str(CONNECT_TIMEOUT_S),
    "application_name": "agent-bridge",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": str(STATEMENT_TIMEOUT_MS),
}
# SQLSTATEs of a call that lost a race or waited too long: try again (PostgreSQL
# Appendix A: 40001 serialization_failure, 40P01 deadlock_detected, 55P03
# lock_not_available, 57014 query_canceled, which statement_timeout raises).
_BUSY = frozenset({"40001", "40P01", "55P03", "57014"})
_GROUP_MAX = 64  # statements sent together at most (group commit, `Pool.execute`)
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(url: str) -> str:
    """`url` with its password replaced by `***` (a URL's userinfo or `password=`
    parameter, or a key=value conninfo's)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return _PASSWORD_KV.sub(r"\1***", url)
    if not parts.scheme:
        return _PASSWORD_KV.sub(r"\1***", url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = "&".join(
        f"{k}=***" if k.lower() == "password" else p
        for p in parts.query.split("&") if p
        for k in [p.split("=", 1)[0]]
    )  # fmt: skip
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def password_of(url: str) -> str | None:
    """The password `url` carries (its userinfo's or a `password` parameter), if any."""
    import psycopg.conninfo

    try:
        return psycopg.conninfo.conninfo_to_dict(url).get("password")  # type: ignore[return-value]
    except Exception:  # a malformed URL: its error says so; nothing to scrub that connect reads
        return None


def _scrub(text: str, url: str) -> str:
    secret = password_of(url)
    text = text.replace(url, redact(url))
    if secret:
        text = text.replace(secret, "***")
    return _PASSWORD_KV.sub(r"\1***", text)


def translate(exc: BaseException, url: str) -> BridgeError:
    """The bridge's error for what psycopg raised: a race or a timeout is `Overloaded`
    (try again), a database that cannot be reached too (the call did not happen, or
    was rolled back), anything else our bug (`InternalError`)."""
    import psycopg

    message = _scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, url)
    state = getattr(exc, "sqlstate", None)
    if state in _BUSY:
        return Overloaded(f"the store is busy ({message}); try again")
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return Overloaded(f"the store's database cannot be reached ({message}); try again")
    if isinstance(exc, psycopg.Error):
        return InternalError(f"postgresql: {message}")
    return InternalError(f"postgresql: {type(exc).__name__}: {message}")


def connect(url: str) -> Any:
    """A new autocommit connection (each store call opens its own transaction)."""
    import psycopg
    import psycopg.conninfo

    given = psycopg.conninfo.conninfo_to_dict(url)
    extra = {k: v for k, v in _DEFAULTS.items() if k not in given}
    if str(given.get("host", "")).startswith("/"):  # a unix socket: no TCP settings
        extra = {k: v for k, v in extra.items() if k in ("connect_timeout", "application_name")}
    conn = psycopg.connect(url, autocommit=True, **extra)
    try:
        conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}; SET lock_timeout = {LOCK_TIMEOUT_MS}")
    except BaseException:
        conn.close()
        raise
    return conn


class _Job:
    """A call waiting for a connection: `fn(connection)`, or a `statement` (text and
    parameters) that may share one round trip with others (`Pool.execute`)."""

    __slots__ = ("fn", "statement", "done", "result", "error")

    def __init__(self, fn: Callable[[Any], Any] | None, statement: tuple[str, Any] | None = None) -> None:
        self.fn, self.statement = fn, statement
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Worker:
    """One connection and the thread of its own that runs calls on it: a call costs a
    queue put and a wake-up each way (`trio.to_thread` costs twice as much CPU,
    measured). The connection is made at the first call, and again at the next call
    after it broke."""

    def __init__(self, url: str, done: Callable[[_Worker, list[_Job]], None]) -> None:
        self._url, self._done = url, done
        self._token = trio.lowlevel.current_trio_token()
        self._jobs: queue.SimpleQueue[list[_Job] | None] = queue.SimpleQueue()
        self._conn: Any = None
        threading.Thread(target=self._serve, name="bridge-store-pg", daemon=True).start()

    def submit(self, jobs: list[_Job]) -> None:
        self._jobs.put(jobs)

    def stop(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while (jobs := self._jobs.get()) is not None:
            if len(jobs) == 1 or not self._together(jobs):
                for job in jobs:
                    self._run(job)
            try:
                self._token.run_sync_soon(self._done, self, jobs)
            except trio.RunFinishedError:  # the loop is gone (a forced exit): nobody waits
                break
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> Any:
        if self._conn is not None and _broken(self._conn):
            self._conn.close()
            self._conn = None
        if self._conn is None:
            self._conn = connect(self._url)
        return self._conn

    def _run(self, job: _Job) -> None:
        try:
            conn = self._connection()
            if job.fn is not None:
                job.result = job.fn(conn)
            else:
                assert job.statement is not None
                conn.execute(*job.statement)
        except BaseException as exc:  # each call's outcome is in its job
            job.error = exc
            if self._conn is not None:
                _rollback(self._conn)

    def _together(self, jobs: list[_Job]) -> bool:
        """Group commit: the statements in one pipeline (one round trip), which is one
        implicit transaction until its Sync (PostgreSQL 55.2.4, "Pipelining"). Whether
        they all committed; if not, nothing did, and each runs again alone (its outcome
        its own: a failure is rare, a bug or a timeout)."""
        try:
            conn = self._connection()
            with conn.pipeline():
                for job in jobs:
                    assert job.statement is not None
                    conn.execute(*job.statement)
        except Exception:  # whose it was is found by running each alone
            if self._conn is not None:  # on a new connection: psycopg's prepared statements
                self._conn.close()  # may be out of step with the server after a failed pipeline
                self._conn = None
            return False
        return True


class Pool:
    """At most `size` connections, each used by one call at a time in its own thread.
    Calls wait in one queue; a connection that comes free takes the next call, or all
    the statements waiting (`execute`) at once."""

    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._size = size
        self._queue: list[_Job] = []
        self._idle: list[_Worker] = []
        self._workers = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"Pool({redact(self._url)!r}, connections={self._workers})"

    async def run(self, fn: Callable[[Any], _T], *, abandon: bool = False) -> _T:
        """`fn(connection)` in a connection's thread; psycopg's errors translated.
        `abandon`: a cancelled caller does not wait for it (`_call`)."""
        return await self._call(_Job(fn), abandon=abandon)  # type: ignore[no-any-return]

    async def execute(self, statement: str, params: Any) -> None:
        """One statement (its own transaction), maybe in one round trip with others."""
        await self._call(_Job(None, (statement, params)))

    async def _call(self, job: _Job, *, abandon: bool = False) -> Any:
        """Queued calls always run (shielded: an outcome is never lost, a write is never
        left half-known); a cancelled caller sees its cancellation at its next checkpoint.
        With `abandon` (a probe, a ping, a renewal: what a time bound must be able to give
        up on) a cancelled caller returns at once: the call is dropped if still queued,
        else it finishes in its thread unwatched, and its connection takes no other call
        until it has (a connection's thread runs one call at a time)."""
        if self._closed:
            raise InternalError("the store is not open")
        self._queue.append(job)
        self._dispatch()
        if abandon:
            try:
                await job.done.wait()
            except BaseException:
                if job in self._queue:
                    self._queue.remove(job)
                raise
        else:
            with trio.CancelScope(shield=True):
                await job.done.wait()
        if job.error is not None:
            if isinstance(job.error, BridgeError) or not isinstance(job.error, Exception):
                raise job.error
            raise translate(job.error, self._url) from job.error
        return job.result

    def _dispatch(self) -> None:
        while self._queue:
            if self._idle:
                worker = self._idle.pop()
            elif self._workers < self._size:
                worker = _Worker(self._url, self._finished)
                self._workers += 1
            else:
                return
            n = 1
            if self._queue[0].statement is not None:
                while n < len(self._queue) and n < _GROUP_MAX and self._queue[n].statement is not None:
                    n += 1
            jobs, self._queue = self._queue[:n], self._queue[n:]
            worker.submit(jobs)

    def _finished(self, worker: _Worker, jobs: list[_Job]) -> None:
        """In the event loop: `worker` ran `jobs`."""
        for job in jobs:
            job.done.set()
        if self._closed and not self._queue:
            worker.stop()
            return
        self._idle.append(worker)
        self._dispatch()

    def close(self) -> None:
        """No new call; each connection closes once the calls queued are done."""
        self._closed = True
        if not self._queue:
            idle, self._idle = self._idle, []
            for worker in idle:
                worker.stop()


def _broken(conn: Any) -> bool:
    """Whether a connection can no longer serve a call (closed, broken, or left inside
    a transaction by a call that failed)."""
    import psycopg.pq

    return bool(conn.closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)


def _rollback(conn: Any) -> None:
    import psycopg

    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
    except psycopg.Error:
        conn.close()
