"""The PostgreSQL store's connections: a small pool, each call in a worker thread, and
what psycopg raises translated into the bridge's errors.

psycopg 3's synchronous API, called through `trio.to_thread.run_sync`: its async API
runs on asyncio only, and the daemon runs on trio (as the SQLite store calls sqlite3
from a thread of its own). A `trio.CapacityLimiter` of `pool_size` bounds the calls in
flight, each on a connection of its own taken from the idle ones or made for it; a
connection that broke is closed, never given back.

Nothing waits forever: connecting gives up after `CONNECT_TIMEOUT_S`, a statement after
`STATEMENT_TIMEOUT_MS` and a lock wait after `LOCK_TIMEOUT_MS` (PostgreSQL runtime
settings `statement_timeout`, `lock_timeout`), and TCP keepalives with
`tcp_user_timeout` notice a server that went away mid-call (libpq connection
parameters; a URL that sets them keeps its own).

The URL carries the password: no repr, log line or error shows it (`redact`).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from bridge.errors import BridgeError, InternalError, Overloaded

__all__ = [
    "CONNECT_TIMEOUT_S", "LOCK_TIMEOUT_MS", "STATEMENT_TIMEOUT_MS", "Pool", "connect", "redact", "translate",
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


def _password(url: str) -> str | None:
    import psycopg.conninfo

    try:
        return psycopg.conninfo.conninfo_to_dict(url).get("password")  # type: ignore[return-value]
    except Exception:  # a malformed URL: its error says so; nothing to scrub that connect reads
        return None


def _scrub(text: str, url: str) -> str:
    secret = _password(url)
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


class Pool:
    """At most `size` connections, each used by one call at a time in a worker thread."""

    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._limiter = trio.CapacityLimiter(size)
        self._idle: list[Any] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"Pool({redact(self._url)!r}, idle={len(self._idle)})"

    async def run(self, fn: Callable[[Any], _T]) -> _T:
        """`fn(connection)` in a worker thread; psycopg's errors translated. Waiting for
        a connection can be cancelled (nothing ran yet); a call that started runs to its
        end (its outcome is never lost), the cancellation landing after it."""
        async with self._limiter:
            if self._closed:
                raise InternalError("the store is not open")
            idle = self._idle.pop() if self._idle else None
            url = self._url

            def work() -> tuple[Any, Exception | None, Any]:
                conn = idle
                if conn is not None and _broken(conn):
                    conn.close()
                    conn = None
                if conn is None:
                    conn = connect(url)  # its failure is the call's: no connection to give back
                try:
                    return conn, None, fn(conn)
                except Exception as exc:
                    _rollback(conn)
                    return conn, exc, None

            try:
                conn, error, result = await trio.to_thread.run_sync(work, abandon_on_cancel=False)
            except Exception as exc:
                raise translate(exc, url) from exc
            if self._closed or _broken(conn):
                conn.close()
            else:
                self._idle.append(conn)
            if error is not None:
                if isinstance(error, BridgeError):
                    raise error
                raise translate(error, url) from error
            return result  # type: ignore[no-any-return]

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


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
