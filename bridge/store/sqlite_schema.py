"""The SQLite store's schema and its migrations.

The schema version is `PRAGMA user_version`; `_MIGRATIONS[n]` takes a database from
version n to n + 1: the steps declared once for both stores in
bridge/store/schema_ddl.py, rendered as SQLite statements, and its data conversions
(callables taking the connection). `migrate` runs every step a file needs in the
caller's one transaction (executescript() is avoided because it would COMMIT it), so a
migration that fails leaves the file as it was: SQLite's DDL is transactional too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from bridge.errors import InternalError
from bridge.store.schema_ddl import MIGRATIONS, check_version, render

__all__ = ["SCHEMA_VERSION", "check_version", "migrate"]

# The steps of bridge/store/schema_ddl.py as SQLite statements (and its conversions).
_MIGRATIONS: tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...] = tuple(
    tuple(render(step, "sqlite") for step in steps) for steps in MIGRATIONS
)
SCHEMA_VERSION = len(_MIGRATIONS)


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
