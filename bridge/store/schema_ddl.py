"""The store's schema, declared once for SQLite and PostgreSQL: its migrations as steps.

`MIGRATIONS[n]` takes a database from schema version n to n + 1, so a later schema adds
one entry and never edits an old one. A step is dialect-neutral (`Table`, `AddColumn`,
`Index`, `DropIndex`) and rendered to each dialect's DDL (`render`), or a data
conversion (`Convert`) with one function per dialect. SQLite runs the steps a file
needs (bridge/store/sqlite_schema.py); a new PostgreSQL database is made at the current
version directly from the tables and indexes the steps add up to (`current`), and one
of an older version runs the steps after it (bridge/store/pg_schema.py). So a future
migration is written here once and both stores get it.

Types: `TEXT`, `REAL` (unix seconds: DOUBLE PRECISION in PostgreSQL), `INT` (sequence
numbers, counts, 0/1 flags: BIGINT), `BLOB` (an event batch: BYTEA). JSON columns are
TEXT in both, encoded by the stores' row code (bridge/store/sqlite_rows.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from bridge.core.access import OWNER_META, owner_of
from bridge.errors import ConfigError
from bridge.store.split_meta import split_meta

__all__ = [
    "AddColumn", "BLOB", "Col", "Convert", "DropIndex", "INT", "Index", "MIGRATIONS", "REAL", "SCHEMA_VERSION",
    "Step", "TEXT", "Table", "check_version", "current", "render",
]  # fmt: skip

Dialect = Literal["sqlite", "pg"]
_META = msgspec.json.Decoder(dict[str, object])
TEXT, REAL, INT, BLOB = "text", "real", "int", "blob"
_TYPES: dict[str, dict[Dialect, str]] = {
    TEXT: {"sqlite": "TEXT", "pg": "TEXT"},
    REAL: {"sqlite": "REAL", "pg": "DOUBLE PRECISION"},
    INT: {"sqlite": "INTEGER", "pg": "BIGINT"},
    BLOB: {"sqlite": "BLOB", "pg": "BYTEA"},
}


class Col(msgspec.Struct, frozen=True):
    name: str
    type: str
    null: bool = False  # NULL allowed (else NOT NULL)
    default: str | None = None  # an SQL literal
    key: bool = False  # the table's one-column primary key

    def sql(self, dialect: Dialect) -> str:
        # SQLite's `TEXT PRIMARY KEY` allows NULL (a legacy quirk its files keep):
        # written as before, so the schema SQLite has stays the same.
        parts = [self.name, _TYPES[self.type][dialect]]
        if self.key:
            parts.append("PRIMARY KEY")
        elif not self.null:
            parts.append("NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default}")
        return " ".join(parts)


class Table(msgspec.Struct, frozen=True):
    name: str
    columns: tuple[Col, ...]
    primary_key: tuple[str, ...] = ()  # a primary key of several columns


class AddColumn(msgspec.Struct, frozen=True):
    table: str
    column: Col


class Index(msgspec.Struct, frozen=True):
    name: str
    table: str
    columns: str  # `updated_at DESC, session_id`: the same in both dialects
    where: str | None = None  # a partial index


class DropIndex(msgspec.Struct, frozen=True):
    name: str


class Convert(msgspec.Struct, frozen=True):
    """Rows rewritten by code, in the migration's transaction: one function per dialect
    taking its connection. None: that dialect never holds a database of the version
    before (PostgreSQL stores start at schema 3)."""

    sqlite: Callable[[Any], None] | None = None
    pg: Callable[[Any], None] | None = None


Step = Table | AddColumn | Index | DropIndex | Convert


def fill_owners(c: Any, *, mark: str) -> None:
    """Schema 4 → 5: each session's `owner` column from the `OWNER_META` its meta names
    (a meta that does not decode, or names no owner as text, leaves it '': unowned)."""
    found: list[tuple[str, str]] = []
    rows = c.execute(f"SELECT session_id, meta FROM sessions WHERE meta LIKE {mark}", ('%"' + OWNER_META + '"%',)).fetchall()
    for sid, meta in rows:
        try:
            owner = owner_of(_META.decode(meta))
        except msgspec.DecodeError:
            continue
        if owner is not None:
            found.append((owner, sid))
    for owner, sid in found:
        c.execute(f"UPDATE sessions SET owner = {mark} WHERE session_id = {mark}", (owner, sid))

_S = Col("session_id", TEXT)
MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    # 0 -> 1: the first schema.
    (
        Table("sessions", (
            Col("session_id", TEXT, key=True), Col("route", TEXT), Col("cwd", TEXT), Col("title", TEXT, null=True),
            Col("created_at", REAL), Col("updated_at", REAL), Col("back_ref", TEXT, null=True),
            Col("options", TEXT), Col("meta", TEXT), Col("last_seq", INT), Col("closed", INT),  # JSON objects; 0/1
        )),  # fmt: skip
        Index("sessions_by_update", "sessions", "updated_at DESC, session_id"),
        Table("turns", (
            Col("turn_id", TEXT, key=True), _S, Col("started_at", REAL), Col("first_seq", INT),
            Col("ended_at", REAL, null=True), Col("last_seq", INT, null=True), Col("stop_reason", TEXT, null=True),
            Col("error", TEXT, null=True), Col("meta", TEXT),  # a JSON object
        )),  # fmt: skip
        Index("turns_by_session", "turns", "session_id"),
        Table("events", (_S, Col("first_seq", INT), Col("last_seq", INT), Col("blob", BLOB)), ("session_id", "first_seq")),
    ),
    # 1 -> 2: the owner of each turn (who may close it when cut), and the open turns.
    (
        AddColumn("turns", Col("owner", TEXT, null=True)),
        Index("turns_open", "turns", "ended_at", where="ended_at IS NULL"),
    ),
    # 2 -> 3: reads by index (issue 16). Turns by (session, first_seq) and by a front's
    # stream position; a summary on each session; each front's state in a row of its
    # own; A2A tasks as rows listed by status time. `split_meta` moves what schema 2
    # kept in `sessions.meta` into these tables and fills the summaries.
    (
        AddColumn("turns", Col("stream_seq", INT, null=True)),
        DropIndex("turns_by_session"),
        Index("turns_by_session", "turns", "session_id, first_seq"),
        Index("turns_by_stream", "turns", "session_id, stream_seq, first_seq", where="stream_seq IS NOT NULL"),
        AddColumn("sessions", Col("turn_count", INT, default="0")),
        AddColumn("sessions", Col("last_stop", TEXT, null=True)),
        AddColumn("sessions", Col("last_cut", INT, default="0")),
        Index("sessions_by_route", "sessions", "route, updated_at DESC, session_id"),
        Table("front_states", (_S, Col("key", TEXT), Col("data", TEXT)), ("session_id", "key")),  # data: a JSON object
        Table("tasks", (
            Col("task_id", TEXT, key=True), _S, Col("route", TEXT), Col("context_id", TEXT), Col("created_at", REAL),
            Col("turn_id", TEXT), Col("state", TEXT), Col("status_ts", REAL), Col("data", TEXT),  # a JSON object
        )),  # fmt: skip
        Index("tasks_by_route", "tasks", "route, status_ts DESC, task_id"),
        Index("tasks_by_context", "tasks", "context_id, status_ts DESC, task_id"),
        # A `status` filter reads only the tasks in that state.
        Index("tasks_by_route_state", "tasks", "route, state, status_ts DESC, task_id"),
        Index("tasks_by_context_state", "tasks", "context_id, state, status_ts DESC, task_id"),
        Index("tasks_by_session", "tasks", "session_id"),
        Index("tasks_by_turn", "tasks", "turn_id"),
        Convert(sqlite=split_meta),
    ),
    # 3 -> 4: the front that opened each session (NULL: stored before), listed by it.
    (
        AddColumn("sessions", Col("front", TEXT, null=True)),
        Index("sessions_by_front", "sessions", "front, updated_at DESC, session_id"),
    ),
    # 4 -> 5: the owner of each session (issue 20: the identity key `meta` names, ''
    # for none), so a caller's listing is filtered in the query, its own by index.
    (
        AddColumn("sessions", Col("owner", TEXT, default="''")),
        Index("sessions_by_owner", "sessions", "owner, updated_at DESC, session_id"),
        Convert(sqlite=functools.partial(fill_owners, mark="?"), pg=functools.partial(fill_owners, mark="%s")),
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


def check_version(version: int, where: str = "state") -> None:
    """A database of a newer release is left alone: a configuration error (a downgrade)."""
    if version > SCHEMA_VERSION:
        raise ConfigError([f"{where}: schema version {version} is newer than this agent-bridge ({SCHEMA_VERSION})"])


def render(step: Step, dialect: Dialect) -> str | Callable[[Any], None]:
    """One step as a statement of `dialect`, or the conversion's function."""
    if isinstance(step, Table):
        lines = [c.sql(dialect) for c in step.columns]
        if step.primary_key:
            lines.append(f"PRIMARY KEY ({', '.join(step.primary_key)})")
        return f"CREATE TABLE {step.name} (\n    " + ",\n    ".join(lines) + "\n)"
    if isinstance(step, AddColumn):
        return f"ALTER TABLE {step.table} ADD COLUMN {step.column.sql(dialect)}"
    if isinstance(step, Index):
        where = f" WHERE {step.where}" if step.where else ""
        return f"CREATE INDEX {step.name} ON {step.table} ({step.columns}){where}"
    if isinstance(step, DropIndex):
        return f"DROP INDEX {step.name}"
    fn = step.sqlite if dialect == "sqlite" else step.pg
    if fn is None:
        raise AssertionError(f"a conversion has no {dialect} version")  # declared wrong: our bug, at import
    return fn


def current(migrations: tuple[tuple[Step, ...], ...] = MIGRATIONS) -> list[Table | Index]:
    """The tables and indexes every step adds up to (what a new database gets); a new
    database has no rows, so conversions are left out."""
    tables: dict[str, Table] = {}
    indexes: dict[str, Index] = {}
    for steps in migrations:
        for step in steps:
            if isinstance(step, Table):
                tables[step.name] = step
            elif isinstance(step, AddColumn):
                t = tables[step.table]
                tables[step.table] = msgspec.structs.replace(t, columns=(*t.columns, step.column))
            elif isinstance(step, Index):
                indexes[step.name] = step
            elif isinstance(step, DropIndex):
                del indexes[step.name]
    return [*tables.values(), *indexes.values()]
