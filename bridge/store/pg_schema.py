"""The PostgreSQL store's schema: made or brought up to date when a store opens.

The tables and indexes are SQLite's (bridge/store/schema_ddl.py, rendered in
PostgreSQL's types), plus two of PostgreSQL's own: `bridge_meta` (the schema version,
what SQLite keeps in `PRAGMA user_version`) and `instances` (each open store's row,
renewed by its heartbeat: whose turns are still running, bridge/store/pg.py).

A new database gets the current version directly; one of an older version runs the
migration steps after its own; one of a newer version is refused (a configuration
error: a downgrade) and left alone. Several daemons may start at once on a new
database: the work runs in one transaction holding a transaction-level advisory lock
(`pg_advisory_xact_lock`, PostgreSQL 9.27.10 "Advisory Lock Functions"), and the
version is read again under it, so exactly one of them creates the schema and the
others find it made. PostgreSQL's DDL is transactional: a migration that fails leaves
the database as it was.
"""

from __future__ import annotations

from typing import Any

from bridge.errors import InternalError
from bridge.store.schema_ddl import INT, MIGRATIONS, REAL, SCHEMA_VERSION, TEXT, Col, Table, check_version, current, render

__all__ = ["DB_NOW", "ensure_schema", "schema_version"]

# The database's clock in unix seconds: every instance compares expiries on it, never
# on its own (machines' clocks differ).
DB_NOW = "extract(epoch from clock_timestamp())::float8"
# pg_advisory_xact_lock's key: "agentbr1" read as a big-endian int64.
_LOCK_KEY = int.from_bytes(b"agentbr1", "big")
_META = Table("bridge_meta", (Col("key", TEXT, key=True), Col("value", TEXT)))
_INSTANCES = Table("instances", (
    Col("instance_id", TEXT, key=True),  # = PgStore.owner, the `owner` of the turns it writes
    Col("started_at", REAL),
    Col("expires_at", REAL),  # database clock; renewed by PgStore.heartbeat
    Col("host", TEXT, default="''"),
    Col("pid", INT, default="0"),
))  # fmt: skip


def schema_version(c: Any) -> int:
    """The database's schema version; 0 for a database with no store in it."""
    # The catalog read as a table, in the statement's snapshot: `to_regclass` would answer
    # from this backend's cache, which an advisory lock does not refresh, and miss a
    # table another daemon created while this one waited for the lock.
    (found,) = c.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'bridge_meta')"
    ).fetchone()
    if not found:
        return 0
    row = c.execute("SELECT value FROM bridge_meta WHERE key = 'schema_version'").fetchone()
    return 0 if row is None else int(row[0])


def ensure_schema(c: Any) -> None:
    """Make or migrate the schema (on an autocommit connection: its own transaction)."""
    version = schema_version(c)
    check_version(version, "store")
    if version == SCHEMA_VERSION:
        return
    with c.transaction():
        c.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        version = schema_version(c)  # again, under the lock: another may have made it
        check_version(version, "store")
        if version == SCHEMA_VERSION:
            return
        if version == 0:
            for step in [*current(), _META, _INSTANCES]:
                c.execute(render(step, "pg"))
            c.execute("INSERT INTO bridge_meta (key, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),))
            return
        for n, steps in enumerate(MIGRATIONS[version:], start=version):
            for step in steps:
                statement = render(step, "pg")
                if isinstance(statement, str):
                    c.execute(statement)
                    continue
                try:
                    statement(c)
                except Exception as exc:  # our conversion's bug: the transaction is rolled back
                    raise InternalError(f"converting the store from schema {n} to {n + 1} failed: {exc!r}") from exc
        c.execute("UPDATE bridge_meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
