"""Reads by index (issue 16), against MemoryStore and SqliteStore alike: task rows listed
by (status time, id) with filters and a keyset cursor, turns by first sequence number
and by a front's stream position, event batches from the one holding the first event
wanted, front states written by key, session summaries, deletes that take everything.
And in SQLite, that each of these reads searches an index, never scans a table."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import InvalidParams
from bridge.store import Store, TaskRecord
from bridge.core.access import OWNER_META
from bridge.store.listing import STATUSES, Visible
from bridge.store.sqlite import DB_FILENAME, SqliteStore
from tests.store_support import STORE_KINDS, batch, opened, session, task, turn

pytestmark = pytest.mark.trio


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened(request.param, tmp_path, request) as s:
        yield s


# -- tasks -------------------------------------------------------------------------------

# (task, session, route, context, state, status_ts): ties at 5.0 and 3.0 on purpose.
TASKS = [
    ("a", "s1", "r", "c1", "TASK_STATE_COMPLETED", 5.0),
    ("b", "s1", "r", "c1", "TASK_STATE_FAILED", 5.0),
    ("c", "s2", "r", "c1", "TASK_STATE_COMPLETED", 7.0),  # a side session of context c1
    ("d", "s3", "r", "c2", "TASK_STATE_WORKING", 3.0),
    ("e", "s3", "r", "c2", "TASK_STATE_COMPLETED", 3.0),
    ("f", "s3", "r", "c2", "TASK_STATE_COMPLETED", 1.0),
    ("g", "s1", "r", "c1", "TASK_STATE_COMPLETED", 5.0),
    ("x", "s9", "other", "c9", "TASK_STATE_COMPLETED", 9.0),  # another route's
]


async def stored_tasks(store: Store) -> None:
    for task_id, sid, route, ctx, state, ts in TASKS:
        await store.save(session(sid, route=route), tasks=[task(task_id, sid, route=route, context_id=ctx, state=state, status_ts=ts)])


def expected(**kw: Any) -> list[str]:
    """The task ids `list_tasks(route="r", **kw)` must return, in order."""
    found = [
        (ts, task_id) for task_id, _, route, ctx, state, ts in TASKS
        if route == "r" and kw.get("context_id") in (None, ctx) and kw.get("state") in (None, state)
        and (kw.get("after_ts") is None or ts > kw["after_ts"])
    ]  # fmt: skip
    return [task_id for _, task_id in sorted(found, key=lambda p: (-p[0], p[1]))]


async def all_pages(store: Store, limit: int, **kw: Any) -> tuple[list[str], list[int]]:
    """Every page of `list_tasks`, followed by its cursor: (ids in order, totals seen)."""
    ids: list[str] = []
    totals: list[int] = []
    cursor = None
    for _ in range(20):
        page = await store.list_tasks(route="r", limit=limit, cursor=cursor, **kw)
        assert len(page.tasks) <= limit
        ids += [t.task_id for t in page.tasks]
        totals.append(page.total)
        if page.next is None:
            return ids, totals
        assert page.next == (page.tasks[-1].status_ts, page.tasks[-1].task_id)
        cursor = page.next
    raise AssertionError("list_tasks never ended")


@pytest.mark.parametrize(
    "filters",
    [{}, {"context_id": "c1"}, {"context_id": "c2"}, {"state": "TASK_STATE_COMPLETED"}, {"after_ts": 3.0},
     {"context_id": "c1", "state": "TASK_STATE_COMPLETED", "after_ts": 4.0}, {"context_id": "nowhere"}],
)  # fmt: skip
async def test_list_tasks_pages_newest_first_ties_by_id_with_filters(store: Store, filters: dict[str, Any]) -> None:
    await stored_tasks(store)
    want = expected(**filters)
    one = await store.list_tasks(route="r", **filters)
    assert ([t.task_id for t in one.tasks], one.total, one.next) == (want, len(want), None)
    for limit in (1, 2, 3, len(want) + 1):
        ids, totals = await all_pages(store, limit, **filters)
        assert ids == want, limit  # every task once, in order, across the ties
        assert set(totals) == {len(want)}  # the total is the filter's, whatever the page
    assert expected() == ["c", "a", "b", "g", "d", "e", "f"]  # the ties, by id


async def test_list_tasks_is_per_route_and_reads_back_the_row(store: Store) -> None:
    await stored_tasks(store)
    page = await store.list_tasks(route="other")
    assert [t.task_id for t in page.tasks] == ["x"] and page.total == 1
    record = task("h", "s1", context_id="c1", status_ts=2.0, data={"mids": {"h": "m"}, "push": [{"id": "p", "token": "t"}]})
    await store.save(session("s1", route="r"), tasks=[record])
    assert await store.get_task("h") == record
    assert await store.get_task("nope") is None
    assert await store.list_tasks(route="nowhere") == (await store.list_tasks(route="nowhere"))
    assert (await store.list_tasks(route="r", limit=0)).tasks == []


async def test_a_task_written_again_moves_in_the_listing(store: Store) -> None:
    await stored_tasks(store)
    await store.save(session("s3", route="r"), tasks=[task("f", "s3", context_id="c2", state="TASK_STATE_FAILED", status_ts=8.0, turn_id="f2")])
    page = await store.list_tasks(route="r", limit=2)
    assert [t.task_id for t in page.tasks] == ["f", "c"] and page.total == 7
    got = await store.get_task("f")
    assert got is not None and (got.state, got.turn_id) == ("TASK_STATE_FAILED", "f2")
    assert expected(state="TASK_STATE_FAILED") == ["b"]
    failed = await store.list_tasks(route="r", state="TASK_STATE_FAILED")
    assert [t.task_id for t in failed.tasks] == ["f", "b"]


# -- turns -------------------------------------------------------------------------------


async def test_list_turns_by_first_seq_ranges(store: Store) -> None:
    turns = [turn(f"t{n}", first_seq=n * 10, started_at=float(n)) for n in range(1, 7)]
    await store.save(session("s1"), turns=turns[3:])
    await store.save(session("s1"), turns=turns[:3])
    await store.save(session("s2"), turns=[turn("other", "s2", first_seq=15)])

    async def ids(**kw: Any) -> list[str]:
        return [t.turn_id for t in await store.list_turns("s1", **kw)]

    assert await ids() == ["t1", "t2", "t3", "t4", "t5", "t6"]
    assert await ids(after_seq=20) == ["t3", "t4", "t5", "t6"]  # after: strictly
    assert await ids(after_seq=19) == ["t2", "t3", "t4", "t5", "t6"]
    assert await ids(before_seq=40) == ["t1", "t2", "t3"]  # before: strictly
    assert await ids(after_seq=10, before_seq=50, limit=2) == ["t2", "t3"]
    assert await ids(newest_first=True, limit=2) == ["t6", "t5"]
    assert await ids(before_seq=40, newest_first=True, limit=2) == ["t3", "t2"]
    assert await ids(after_seq=60) == [] and await ids(limit=0) == []


async def test_turn_at_stream_seq_and_set_stream_seqs(store: Store) -> None:
    await store.save(session("s1"), turns=[
        turn("t1", first_seq=1, stream_seq=0), turn("t2", first_seq=5), turn("t3", first_seq=9, stream_seq=12),
        turn("t4", first_seq=14, stream_seq=12), turn("t5", first_seq=20, stream_seq=30),
    ])  # fmt: skip
    await store.save(session("s2"), turns=[turn("u1", "s2", first_seq=1, stream_seq=5)])

    async def at(n: int, sid: str = "s1") -> str | None:
        found = await store.turn_at_stream_seq(sid, n)
        return None if found is None else found.turn_id

    assert await at(-1) is None
    assert [await at(n) for n in (0, 11)] == ["t1", "t1"]  # t2 has no position: never found
    assert [await at(n) for n in (12, 29)] == ["t4", "t4"]  # a tie: the later turn
    assert [await at(n) for n in (30, 10**9)] == ["t5", "t5"]
    assert await at(5, "s2") == "u1" and await at(5, "none") is None

    # A front marks where earlier turns start; a turn id of another session is not touched.
    await store.set_stream_seqs("s1", {"t2": 4, "u1": 1})
    assert await at(4) == "t2"
    got = await store.get_turn("u1")
    assert got is not None and got.stream_seq == 5
    listed = {t.turn_id: t.stream_seq for t in await store.list_turns("s1")}
    assert listed == {"t1": 0, "t2": 4, "t3": 12, "t4": 12, "t5": 30}


# -- event batches -----------------------------------------------------------------------


async def test_read_batches_from_the_batch_holding_the_first_event_wanted(store: Store) -> None:
    for b in (batch(1, 3), batch(4, 7), batch(8, 10), batch(11, 11), batch(12, 20)):
        await store.save(session("s1", last_seq=b.last_seq), batch=b)
    await store.save(session("s2", last_seq=5), batch=batch(1, 5))

    async def spans(**kw: Any) -> list[tuple[int, int]]:
        return [(b.first_seq, b.last_seq) for b in await store.read_batches("s1", **kw)]

    assert await spans(after_seq=5) == [(4, 7), (8, 10), (11, 11), (12, 20)]  # (4, 7) holds 5 and 6..7
    assert await spans(after_seq=7) == [(8, 10), (11, 11), (12, 20)]
    assert await spans(after_seq=10) == [(11, 11), (12, 20)]
    assert await spans(after_seq=13) == [(12, 20)]
    assert await spans(after_seq=20) == [] and await spans(after_seq=99) == []
    assert await spans(through_seq=7) == [(1, 3), (4, 7)]
    assert await spans(through_seq=8) == [(1, 3), (4, 7), (8, 10)]  # the batch holding 8, whole
    assert await spans(after_seq=5, through_seq=11) == [(4, 7), (8, 10), (11, 11)]
    assert await spans(after_seq=2, limit=2) == [(1, 3), (4, 7)]
    assert await spans(after_seq=7, through_seq=15, limit=1) == [(8, 10)]
    assert await spans(limit=0) == []
    whole = await store.read_batches("s1", after_seq=5, through_seq=7)
    assert whole == [batch(4, 7)]  # blobs as stored
    assert [(b.first_seq, b.last_seq) for b in await store.read_batches("s2", after_seq=4)] == [(1, 5)]


# -- front states and summaries ------------------------------------------------------------


async def test_save_writes_and_removes_only_the_states_named(store: Store) -> None:
    await store.put_session(session("s1", states={"a2a": {"ctx": None, "n": 1}, "chat": {"intent": "i"}}))

    async def states() -> dict[str, Any]:
        got = await store.get_session("s1")
        assert got is not None
        return got.states

    record = session("s1", states={"a2a": {"n": 2}, "other": {"x": 1}})
    await store.save(record, states=["a2a"])
    assert await states() == {"a2a": {"n": 2}, "chat": {"intent": "i"}}  # "other" was not named
    await store.save(session("s1", states={}), states=[])
    assert await states() == {"a2a": {"n": 2}, "chat": {"intent": "i"}}  # none named: none touched
    await store.save(session("s1", states={"other": {"x": 1}}), states=["chat", "other"])
    assert await states() == {"a2a": {"n": 2}, "other": {"x": 1}}  # named and missing: removed
    await store.put_session(session("s1", states={"chat": {"intent": "j"}}))
    assert await states() == {"chat": {"intent": "j"}}  # put_session replaces them all
    listed, _ = await store.list_sessions()
    assert [r.states for r in listed] == [{"chat": {"intent": "j"}}]


async def test_the_summary_round_trips_with_the_record(store: Store) -> None:
    record = session("s1", turn_count=5000, last_stop="cancelled", last_cut=True, updated_at=3.0)
    await store.save(record, turns=[turn("t1")])
    assert await store.get_session("s1") == record
    await store.put_session(session("s2", turn_count=1, updated_at=2.0))
    listed, total = await store.list_sessions()
    assert [(r.session_id, r.turn_count, r.last_stop, r.last_cut) for r in listed] == [
        ("s1", 5000, "cancelled", True), ("s2", 1, None, False)
    ] and total == 2  # fmt: skip


async def test_delete_session_takes_its_tasks_and_states(store: Store) -> None:
    await stored_tasks(store)
    await store.save(session("s1", route="r", last_seq=3, states={"a2a": {}}), turns=[turn("s1-t")], batch=batch(1, 3), states=["a2a"])
    assert await store.delete_session("s1") is True
    assert [await store.get_task(t) for t in ("a", "b", "g")] == [None, None, None]
    assert await store.get_session("s1") is None
    # Written again under the same id: nothing of the old one comes back.
    await store.put_session(session("s1", route="r"))
    got = await store.get_session("s1")
    assert got is not None and got.states == {} and await store.list_turns("s1") == [] and await store.read_batches("s1") == []
    assert expected() == ["c", "a", "b", "g", "d", "e", "f"]
    assert [t.task_id for t in (await store.list_tasks(route="r")).tasks] == ["c", "d", "e", "f"]


# -- sessions by front, status and title ------------------------------------------------------

# (session, route, front, title, turn_count, last_stop, last_cut, updated_at): one of each status.
SESSIONS = [
    ("new", "r", "chat", "Fix the 100% bug", 0, None, False, 9.0),
    ("run", "r", "acp", "fix_it now", 2, None, False, 8.0),
    ("ask", "other", "a2a", None, 1, "input_required", False, 7.0),
    ("done", "r", "mcp", "FIX the docs", 3, "end_turn", False, 6.0),
    ("refused", "r", "cli", "refused", 1, "refusal", False, 5.5),
    ("bad", "other", "acp", "broken", 1, "failed", False, 5.0),
    ("stop", "r", "chat", "stopped", 1, "cancelled", False, 4.0),
    ("cut", "r", None, "cut short", 1, "failed", True, 3.0),
]


async def stored_sessions(store: Store) -> None:
    for sid, route, front, title, turns, stop, cut, ts in SESSIONS:
        await store.put_session(
            session(sid, route=route, front=front, title=title, turn_count=turns, last_stop=stop, last_cut=cut, updated_at=ts)
        )


@pytest.mark.parametrize(
    ("filters", "ids"),
    [
        ({"status": "created"}, ["new"]),
        ({"status": "running"}, ["run"]),
        ({"status": "waiting_for_input"}, ["ask"]),
        ({"status": "completed"}, ["done", "refused"]),
        ({"status": "failed"}, ["bad"]),
        ({"status": "interrupted"}, ["stop", "cut"]),
        ({"front": "acp"}, ["run", "bad"]),
        ({"front": "unknown"}, ["cut"]),
        ({"front": "acp", "route": "r"}, ["run"]),
        ({"q": "fix"}, ["new", "run", "done"]),  # any case
        ({"q": "100%"}, ["new"]),  # `%` and `_` are themselves, not wildcards
        ({"q": "x_i"}, ["run"]),
        ({"q": "%"}, ["new"]),
        ({"q": "fix", "status": "completed", "route": "r"}, ["done"]),
        ({"route": "other", "status": "running"}, []),
    ],
)  # fmt: skip
async def test_list_sessions_filters_by_front_status_and_title(store: Store, filters: dict[str, Any], ids: list[str]) -> None:
    await stored_sessions(store)
    page, total = await store.list_sessions(**filters)
    assert ([r.session_id for r in page], total) == (ids, len(ids))
    if len(ids) > 1:  # paged like the rest: the total is of every match
        page, total = await store.list_sessions(limit=1, offset=1, **filters)
        assert ([r.session_id for r in page], total) == (ids[1:2], len(ids))


async def test_count_sessions_by_status_front_and_route_and_bad_filters_are_refused(store: Store) -> None:
    assert await store.count_sessions() == {
        "status": dict.fromkeys(STATUSES, 0), "front": {"acp": 0, "a2a": 0, "chat": 0, "mcp": 0, "cli": 0}, "route": {},
    }  # fmt: skip
    await stored_sessions(store)
    counts = await store.count_sessions()
    assert counts == {
        "status": {"created": 1, "running": 1, "waiting_for_input": 1, "completed": 2, "failed": 1, "interrupted": 2},
        "front": {"acp": 2, "a2a": 1, "chat": 2, "mcp": 1, "cli": 1, "unknown": 1},
        "route": {"other": 2, "r": 6},
    }
    for status in STATUSES:  # the counts and the filter agree
        assert (await store.list_sessions(status=status, limit=0))[1] == counts["status"][status]
    for bad, named in (({"status": "done"}, "waiting_for_input"), ({"front": "ws"}, "mcp, cli, unknown"), ({"q": "x" * 201}, "200")):
        with pytest.raises(InvalidParams, match=named):
            await store.list_sessions(**bad)


# -- sessions one caller may see (issue 20) ----------------------------------------------------

# (session, route, owner): "open" shows every session, "own" its caller's and unowned
# ones, "peek" only others', "shut" none; "gone" is no configured route (its own).
OWNED = [
    ("o-me", "open", "me"), ("o-you", "open", "you"), ("o-nobody", "open", None),
    ("w-me", "own", "me"), ("w-you", "own", "you"), ("w-nobody", "own", None),
    ("p-me", "peek", "me"), ("p-you", "peek", "you"), ("p-nobody", "peek", None),
    ("s-me", "shut", "me"), ("s-you", "shut", "you"),
    ("g-me", "gone", "me"), ("g-you", "gone", "you"),
]  # fmt: skip
ME = Visible(owner="me", every=("open",), others=("peek",), hidden=("shut",))
SEEN = ["o-me", "o-you", "o-nobody", "w-me", "w-nobody", "p-you", "g-me"]  # newest first: OWNED's order


async def stored_owned(store: Store) -> None:
    for n, (sid, route, owner) in enumerate(OWNED):
        meta: dict[str, object] = {OWNER_META: owner} if owner else {}
        await store.put_session(session(sid, route=route, meta=meta, updated_at=100.0 - n, turn_count=n % 2))
        await store.save(session(sid, route=route, meta=meta, updated_at=100.0 - n, turn_count=n % 2),
                         tasks=[task(f"t-{sid}", sid, route=route, status_ts=100.0 - n)])  # fmt: skip


async def test_a_listing_shows_one_caller_only_what_it_may_see_pages_and_totals_alike(store: Store) -> None:
    await stored_owned(store)
    page, total = await store.list_sessions(visible=ME)
    assert ([r.session_id for r in page], total) == (SEEN, len(SEEN))
    for offset in range(len(SEEN)):  # full pages of what it sees: none comes short, the total is its own
        page, total = await store.list_sessions(visible=ME, limit=2, offset=offset)
        assert ([r.session_id for r in page], total) == (SEEN[offset : offset + 2], len(SEEN))
    page, total = await store.list_sessions(visible=ME, route="own", status="running", limit=1)
    assert ([r.session_id for r in page], total) == (["w-me"], 2)  # with the other filters
    you = Visible(owner="you")  # no route named: each shows its own and the unowned
    assert [r.session_id for r in (await store.list_sessions(visible=you))[0]] == [
        "o-you", "o-nobody", "w-you", "w-nobody", "p-you", "p-nobody", "s-you", "g-you",
    ]  # fmt: skip
    assert (await store.list_sessions())[1] == len(OWNED)  # no caller named: everything, as before


async def test_counts_are_of_what_the_caller_may_see(store: Store) -> None:
    await stored_owned(store)
    counts = await store.count_sessions(visible=ME)
    assert counts["route"] == {"gone": 1, "open": 3, "own": 2, "peek": 1}
    assert sum(counts["status"].values()) == len(SEEN) == sum(counts["front"].values())
    assert sum((await store.count_sessions())["status"].values()) == len(OWNED)


async def test_tasks_are_listed_by_their_sessions_owner(store: Store) -> None:
    await stored_owned(store)
    for route, prefix in (("open", "o-"), ("own", "w-"), ("peek", "p-"), ("shut", "s-"), ("gone", "g-")):
        want = [f"t-{sid}" for sid in SEEN if sid.startswith(prefix)]
        ids: list[str] = []
        cursor = None
        for _ in range(10):
            page = await store.list_tasks(route=route, visible=ME, limit=1, cursor=cursor)
            assert page.total == len(want), route  # its own total, on every page
            ids += [t.task_id for t in page.tasks]
            if page.next is None:
                break
            cursor = page.next
        assert ids == want, route


# -- SQLite plans --------------------------------------------------------------------------


async def test_sqlite_reads_search_indexes_never_scan_tasks_turns_or_events(tmp_path: Path) -> None:
    """Every statement these reads run, explained by SQLite's planner (which assumes big
    tables when no statistics exist): a SEARCH through an index, never a SCAN of tasks,
    turns or events, and listing tasks in the index's order (no sort of the matches)."""
    store = SqliteStore(str(tmp_path / "state"))
    await store.open()
    try:
        await stored_tasks(store)
        await store.save(session("s1", last_seq=3), turns=[turn("t1", stream_seq=0)], batch=batch(1, 3))
        assert store._conn is not None
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)  # in the store's thread: statements with their values

        reads: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("list_tasks by route", lambda: store.list_tasks(route="r", limit=2)),
            ("list_tasks by route, next page", lambda: store.list_tasks(route="r", limit=2, cursor=(5.0, "a"))),
            ("list_tasks by route and state", lambda: store.list_tasks(route="r", state="TASK_STATE_COMPLETED", after_ts=2.0)),
            ("list_tasks by context", lambda: store.list_tasks(route="r", context_id="c1", limit=2, cursor=(5.0, "a"))),
            ("get_task", lambda: store.get_task("a")),
            ("read_batches", lambda: store.read_batches("s1", after_seq=2, through_seq=9, limit=4)),
            ("list_turns", lambda: store.list_turns("s1", after_seq=0, before_seq=9, limit=2, newest_first=True)),
            ("turn_at_stream_seq", lambda: store.turn_at_stream_seq("s1", 5)),
            ("prunable", lambda: store.prunable(10.0, limit=5, after=(0.5, "s9"))),
            ("prune", lambda: store.prune(["s3"], before_ts=10.0)),
            ("list_sessions by route", lambda: store.list_sessions(route="r", limit=2)),
            ("list_sessions by front", lambda: store.list_sessions(front="acp", limit=2, offset=1)),
            ("list_sessions by front and status", lambda: store.list_sessions(front="acp", status="running", q="fix")),
            ("list_sessions of one caller", lambda: store.list_sessions(visible=Visible(owner="me", hidden=("x",)), limit=2)),
            ("count_sessions of one caller", lambda: store.count_sessions(visible=Visible(owner="me"))),
            ("list_tasks of one caller", lambda: store.list_tasks(route="r", visible=Visible(owner="me"), limit=2)),
        ]
        plans: dict[str, list[tuple[str, list[str]]]] = {}
        with sqlite3.connect(tmp_path / "state" / DB_FILENAME) as plain:
            for name, read in reads:
                seen.clear()
                await read()
                statements = [s for s in seen if s.startswith(("SELECT", "DELETE", "UPDATE"))]
                assert statements, name
                plans[name] = [(s, [row[3] for row in plain.execute(f"EXPLAIN QUERY PLAN {s}")]) for s in statements]
        plain.close()
        for name, explained in plans.items():
            for statement, steps in explained:
                scans = [s for s in steps if s.startswith(("SCAN tasks", "SCAN turns", "SCAN events"))]
                assert not scans, (name, statement, steps)
                assert any(s.startswith("SEARCH") for s in steps), (name, statement, steps)
                if name.startswith("list_tasks") or name in ("list_turns", "read_batches", "turn_at_stream_seq", "prunable"):
                    assert not [s for s in steps if "TEMP B-TREE" in s], (name, statement, steps)
        by_index = {name: " ".join(s for _, steps in explained for s in steps) for name, explained in plans.items()}
        assert "tasks_by_route" in by_index["list_tasks by route, next page"]
        assert "tasks_by_context" in by_index["list_tasks by context"]
        assert "turns_by_session" in by_index["list_turns"] and "turns_by_stream" in by_index["turn_at_stream_seq"]
        assert "sessions_by_update" in by_index["prunable"] and "turns_open" in by_index["prunable"]
        assert "sessions_by_route" in by_index["list_sessions by route"]
        assert "sessions_by_front" in by_index["list_sessions by front"]
        assert "sessions_by_front" in by_index["list_sessions by front and status"]
        # A caller's own sessions by the owner index, whatever the store holds of others'.
        assert "sessions_by_owner" in by_index["list_sessions of one caller"]
        assert "sessions_by_owner" in by_index["count_sessions of one caller"]
        assert "tasks_by_route" in by_index["list_tasks of one caller"]
        for name in ("list_sessions by route", "list_sessions by front"):  # the page in the index's order
            assert not [s for _, steps in plans[name] for s in steps if "TEMP B-TREE" in s], plans[name]
    finally:
        await store.close()


async def test_task_rows_hide_their_data_from_repr() -> None:
    record = TaskRecord(task_id="t", session_id="s", route="r", context_id="s", created_at=0.0, turn_id="t",
                        state="TASK_STATE_COMPLETED", status_ts=1.0, data={"push": [{"token": "secret"}]})  # fmt: skip
    assert "secret" not in repr(record)
