"""The SQLite store's schema and its migrations.

The schema version is `PRAGMA user_version`; `_MIGRATIONS[n]` takes a database from
version n to n + 1, so a later schema adds one entry and never edits an old one. A step
is SQL statements or callables taking the connection (a data conversion); `migrate`
runs every step a file needs in the caller's one transaction (executescript() is
avoided because it would COMMIT it), so a migration that fails leaves the file as it
was: SQLite's DDL is transactional too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from bridge.errors import ConfigError, InternalError
from bridge.store.split_meta import split_meta

__all__ = ["SCHEMA_VERSION", "check_version", "migrate"]

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
    # own; A2A tasks as rows listed by status time. `split_meta` moves what schema 2
    # kept in `sessions.meta` into these tables and fills the summaries.
    (
        "ALTER TABLE turns ADD COLUMN stream_seq INTEGER",
        "DROP INDEX turns_by_session",
        "CREATE INDEX turns_by_session ON turns (session_id, first_seq)",
        "CREATE INDEX turns_by_stream ON turns (session_id, stream_seq, first_seq) WHERE stream_seq IS NOT NULL",
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
        # A `status` filter reads only the tasks in that state.
        "CREATE INDEX tasks_by_route_state ON tasks (route, state, status_ts DESC, task_id)",
        "CREATE INDEX tasks_by_context_state ON tasks (context_id, state, status_ts DESC, task_id)",
        "CREATE INDEX tasks_by_session ON tasks (session_id)",
        "CREATE INDEX tasks_by_turn ON tasks (turn_id)",
        split_meta,
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)


def check_version(version: int) -> None:
    """A file of a newer release is left alone: a configuration error (a downgrade)."""
    if version > SCHEMA_VERSION:
        raise ConfigError([f"state: schema version {version} is newer than this agent-bridge ({SCHEMA_VERSION})"])


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database to `SCHEMA_VERSION`, inside the caller's transaction."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    check_version(version)
    for n, step in enumerate(_MIGRATIONS[version:], start=version):
        for statement in step:
            if not callable(statement):
                conn.execute(statement)
                continue
            try:
                statement(conn)
            except sqlite3.Error:
                raise
            except Exception as exc:  # our conversion's bug: the transaction is rolled back
                raise InternalError(f"converting the store from schema {n} to {n + 1} failed: {exc!r}") from exc
    # user_version lives in the database header and is written inside this transaction.
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
