"""Listing sessions with filters, and counting them: one definition for every store.

A session's status is read from the summary its row keeps (`turn_count`, `last_stop`,
`last_cut`, bridge/store/base.py), never from its turns, so a filtered listing and the
counts cost the same however long the sessions' histories are:

    created            no turn yet
    running            a turn started and has not ended (it may be awaiting an answer)
    waiting_for_input  the last turn ended asking for input (`input_required`)
    completed          the last turn ended otherwise
    failed             the last turn failed
    interrupted        the last turn was cancelled, or cut short (`close_cut_turns`)

`where` gives the SQL filters of SQLite and PostgreSQL (their placeholders differ) and
`matches` the same filters for the memory store; `fold_counts` turns the rows of the
one GROUP BY of `COUNT_SQL` into the counts by status, front and route.

`Visible` is the one caller's view when routes have access rules (README: "Access
control"): which sessions it may see in a listing, by route and by the session's
`owner` column (its owner's identity key, '' when it has none; bridge/core/access.py).
It filters in the query, so a page holds `limit` sessions the caller may see and the
total and counts are of those only: nobody learns how many sessions others have.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from bridge.core.access import owner_of
from bridge.errors import InvalidParams
from bridge.store.base import SessionRecord
from bridge.store.visible import Visible

__all__ = [
    "COUNT_SQL", "FRONTS", "MAX_QUERY", "STATUSES", "UNKNOWN_FRONT", "Visible", "count_sql", "fold_counts", "matches",
    "status_of", "visible_sql", "where",
]  # fmt: skip

STATUSES = ("created", "running", "waiting_for_input", "completed", "failed", "interrupted")
# The fronts that open sessions (the subscriber `protocol` labels, bridge/session/interfaces.py,
# and "cli": `agent-bridge ask`); UNKNOWN_FRONT: a session stored before schema 4.
FRONTS = ("acp", "a2a", "chat", "mcp", "cli")
UNKNOWN_FRONT = "unknown"
MAX_QUERY = 200  # characters of a title search

# Stop reasons the status names apart (bridge.core.events.StopReason values).
_SPECIAL = "('cancelled', 'failed', 'input_required')"
_STATUS_SQL = {
    "created": "turn_count = 0",
    "running": "turn_count > 0 AND last_stop IS NULL AND last_cut = 0",
    "waiting_for_input": "last_stop = 'input_required' AND last_cut = 0",
    "completed": f"last_stop IS NOT NULL AND last_stop NOT IN {_SPECIAL} AND last_cut = 0",
    "failed": "last_stop = 'failed' AND last_cut = 0",
    "interrupted": "turn_count > 0 AND (last_cut = 1 OR last_stop = 'cancelled')",
}
_BY_STOP = {"cancelled": "interrupted", "failed": "failed", "input_required": "waiting_for_input"}

# One pass over the sessions: a group per (route, front, summary), few whatever the count.
COUNT_SQL = (
    "SELECT route, front, turn_count > 0, last_stop, last_cut, COUNT(*) FROM sessions "
    "GROUP BY route, front, turn_count > 0, last_stop, last_cut"
)


def visible_sql(dialect: Literal["sqlite", "pg"], visible: Visible, table: str = "") -> tuple[str, list[Any]]:
    """`visible` as one SQL condition on the sessions table (its columns prefixed by
    `table`) and its parameters. Its own sessions are read by `sessions_by_owner`."""
    mark = "?" if dialect == "sqlite" else "%s"
    t = f"{table}." if table else ""

    def among(routes: tuple[str, ...]) -> str:
        return ", ".join([mark] * len(routes))

    parts: list[str] = []
    params: list[Any] = []
    if visible.every:
        parts.append(f"{t}route IN ({among(visible.every)})")
        params += visible.every
    not_own = (*visible.others, *visible.hidden)
    own = f"{t}owner IN ({mark}, '')"
    parts.append(f"({own} AND {t}route NOT IN ({among(not_own)}))" if not_own else own)
    params += [visible.owner, *not_own]
    if visible.others:
        parts.append(f"({t}owner NOT IN ({mark}, '') AND {t}route IN ({among(visible.others)}))")
        params += [visible.owner, *visible.others]
    return "(" + " OR ".join(parts) + ")", params


def count_sql(dialect: Literal["sqlite", "pg"], visible: Visible | None) -> tuple[str, list[Any]]:
    """`COUNT_SQL` over the sessions `visible` lets its caller see (all: None)."""
    if visible is None:
        return COUNT_SQL, []
    cond, params = visible_sql(dialect, visible)
    select, group = COUNT_SQL.split(" GROUP BY ")
    return f"{select} WHERE {cond} GROUP BY {group}", params


def status_of(turns: int | bool, last_stop: str | None, last_cut: int | bool) -> str:
    """The status of a stored summary (the same as `_STATUS_SQL`'s)."""
    if not turns:
        return "created"
    if last_cut:
        return "interrupted"
    if last_stop is None:
        return "running"
    return _BY_STOP.get(last_stop, "completed")


def _check(status: str | None, front: str | None, q: str | None) -> None:
    if status is not None and status not in STATUSES:
        raise InvalidParams(f"status must be one of {', '.join(STATUSES)}; got {status[:40]!r}")
    if front is not None and front not in (*FRONTS, UNKNOWN_FRONT):
        raise InvalidParams(f"front must be one of {', '.join((*FRONTS, UNKNOWN_FRONT))}; got {front[:40]!r}")
    if q is not None and len(q) > MAX_QUERY:
        raise InvalidParams(f"q must be at most {MAX_QUERY} characters")


def _like(q: str) -> str:
    """A LIKE pattern matching `q` anywhere, `\\` escaping its wildcards."""
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def where(
    dialect: Literal["sqlite", "pg"], *, route: str | None = None, cwd: str | None = None, front: str | None = None,
    status: str | None = None, q: str | None = None, visible: Visible | None = None,
) -> tuple[str, list[Any]]:  # fmt: skip
    """`WHERE ...` (or "") and its parameters. Route and front are indexed
    (`sessions_by_route`, `sessions_by_front`), and so is the owner (`sessions_by_owner`);
    the others filter rows read in order."""
    _check(status, front, q)
    mark = "?" if dialect == "sqlite" else "%s"
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("route", route), ("cwd", cwd)):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if front == UNKNOWN_FRONT:
        clauses.append("front IS NULL")
    elif front is not None:
        clauses.append(f"front = {mark}")
        params.append(front)
    if status is not None:
        clauses.append(f"({_STATUS_SQL[status]})")
    if q:
        # SQLite's LIKE ignores the case of ASCII letters; PostgreSQL's ILIKE of every letter.
        clauses.append(f"title {'LIKE' if dialect == 'sqlite' else 'ILIKE'} {mark} ESCAPE '\\'")
        params.append(_like(q))
    if visible is not None:
        cond, more = visible_sql(dialect, visible)
        clauses.append(cond)
        params += more
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def matches(
    r: SessionRecord, *, route: str | None = None, cwd: str | None = None, front: str | None = None,
    status: str | None = None, q: str | None = None, visible: Visible | None = None,
) -> bool:  # fmt: skip
    """`where`'s filters on a record (the memory store)."""
    _check(status, front, q)
    return (
        (visible is None or visible.shows(r.route, owner_of(r.meta)))
        and (route is None or r.route == route)
        and (cwd is None or r.cwd == cwd)
        and (front is None or (r.front or UNKNOWN_FRONT) == front)
        and (status is None or status_of(r.turn_count, r.last_stop, r.last_cut) == status)
        and (not q or q.casefold() in (r.title or "").casefold())
    )


def fold_counts(rows: Iterable[tuple[str, str | None, Any, str | None, Any, int]]) -> dict[str, dict[str, int]]:
    """Rows of `COUNT_SQL` as {"status": .., "front": .., "route": ..}: every status and
    known front (zero included), the routes and UNKNOWN_FRONT that have sessions."""
    status = dict.fromkeys(STATUSES, 0)
    fronts = dict.fromkeys(FRONTS, 0)
    routes: dict[str, int] = {}
    for route, front, turns, stop, cut, n in rows:
        status[status_of(turns, stop, cut)] += n
        key = front or UNKNOWN_FRONT
        fronts[key] = fronts.get(key, 0) + n
        routes[route] = routes.get(route, 0) + n
    return {"status": status, "front": fronts, "route": dict(sorted(routes.items()))}
