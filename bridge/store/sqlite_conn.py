"""The SQLite store's connection: opening the file, and running calls in transactions.

Stdlib sqlite3 in WAL mode, one connection, used by one thread of the store's own
(bridge/store/sqlite.py). Several agent-bridge processes may share a state directory
(two editors, or a daemon and an operator's `agent-bridge store` command), so a
transaction that writes takes the write lock up front (`BEGIN IMMEDIATE`) and waits up
to `busy_timeout` for it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from bridge.store.sqlite_schema import SCHEMA_VERSION, check_version, migrate

__all__ = ["BUSY_TIMEOUT_MS", "DB_FILENAME", "Op", "connect", "is_busy", "run_batch", "write"]

DB_FILENAME = "bridge.sqlite3"
BUSY_TIMEOUT_MS = 5000

_T = TypeVar("_T")
_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether `exc` is another process holding a lock past `busy_timeout`."""
    return getattr(exc, "sqlite_errorcode", None) in _BUSY


def write(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
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


def connect(state_dir: str) -> sqlite3.Connection:
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
    # isolation_level=None: no implicit transactions; `write` and `run_batch` open them.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        check_version(version)  # before anything is written, the journal mode included
        _set_wal(conn)
        # Survives kill -9: a commit is in the WAL file (OS page cache) before COMMIT returns;
        # only power loss or an OS crash can drop the last commits, never corrupt the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        # Only a file to migrate takes the write lock at open: a reader (`store stats`)
        # opens while another process writes. `migrate` reads the version again under
        # the lock, so two processes opening an old file convert it once.
        if version != SCHEMA_VERSION:
            write(conn, migrate)
    except BaseException:
        conn.close()
        raise
    return conn


def _set_wal(conn: sqlite3.Connection) -> None:
    """`journal_mode = WAL`, retried: while another process creates the same new
    database, this pragma can fail at once with "database is locked", without waiting
    for `busy_timeout` (seen on about one concurrent first open in fifteen)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # in the store's opening thread, never the event loop


class Op:
    """One store call waiting for the writer: its body, then its outcome. A `bare` call
    runs alone, outside any transaction (VACUUM cannot run inside one)."""

    __slots__ = ("fn", "write", "bare", "done", "result", "error")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any], write: bool, bare: bool = False) -> None:
        self.fn, self.write, self.bare = fn, write, bare
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


def run_batch(conn: sqlite3.Connection, batch: list[Op]) -> None:
    """Every call of `batch` in one transaction, each in its own savepoint, so one that
    fails is rolled back alone and the others still commit. An error that ends the whole
    transaction (busy, disk full) is every call's outcome."""
    if batch[0].bare:
        try:
            batch[0].result = batch[0].fn(conn)
        except Exception as exc:
            batch[0].error = exc
        return
    try:
        # Inside the `try`: a BEGIN that fails (another process held the write lock past
        # `busy_timeout`) is every call's outcome too, never a silent success.
        conn.execute("BEGIN IMMEDIATE" if any(op.write for op in batch) else "BEGIN")
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
