"""A2A tasks read back from the store: GetTask after the turn ended or a restart, and ListTasks.

`replay` re-projects a task from its turns' stored events: the events after the turn
before it, those of its own turns fed to a `TaskProjector` with the turns' times. A
turn the daemon stopped in the middle of never ends: it reads as FAILED. A task of
another route, of a session no A2A client made, or a continuation turn's own id is
an unknown task.

`list_tasks` (A2A 1.0 `ListTasks`, docs/specification.md): the tasks of the route (every session the A2A front
made) or of one context (its session and side sessions), newest status first, with
`status` and `statusTimestampAfter` filters and offset page tokens; states come from
live tasks, then the sessions' `A2AContext` (bridge/fronts/a2a/state.py, written with
the record at every turn end), then the turn records. Its cost grows with the route's sessions (one store read each).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import Any

from bridge.codecs.a2a_task import TaskProjector
from bridge.core.events import StopReason, TurnEnded, TurnError, TurnStarted
from bridge.errors import InvalidParams, NotFound
from bridge.fronts.a2a.state import A2AContext, A2ATask
from bridge.schema import a2a as s
from bridge.session import SessionManager, stored_front_state
from bridge.store import SessionRecord

__all__ = ["context_of", "list_tasks", "replay"]

_S = s.TaskState


def context_of(manager: SessionManager, session_id: str, record: SessionRecord) -> A2AContext | None:
    """The A2A state of a session: the live session's own (it may hold changes not stored
    yet), else the stored record's; None for a session the A2A front did not make."""
    live = manager.live(session_id)
    if live is not None:
        return live.find_front_state(A2AContext)
    return stored_front_state(record.states, A2AContext)


async def replay(manager: SessionManager, route: str, task_id: str) -> tuple[str, TaskProjector]:
    """(session id, projector) of a task, from the store."""
    unknown = NotFound(f"unknown task {task_id!r}")
    turn = await manager.store.get_turn(task_id)
    if turn is None:
        raise unknown
    session = manager.live(turn.session_id)
    record = session.record if session is not None else await manager.store.get_session(turn.session_id)
    state = context_of(manager, turn.session_id, record) if record is not None else None
    if record is None or record.route != route or state is None or task_id in state.cont:
        raise unknown
    task = state.tasks.get(task_id) or A2ATask()
    turn_ids = [task_id, *task.turns]
    turns = {t.turn_id: t for t in await manager.store.list_turns(record.session_id)}
    ordered = sorted(turns.values(), key=lambda t: (t.started_at, t.turn_id))
    before = [t.last_seq or 0 for t in ordered if t.started_at < turn.started_at]
    after = max(before, default=0)
    events = await (session.history(after) if session is not None else manager.read_events(record.session_id, after))
    projector = TaskProjector(
        task_id, state.ctx or record.session_id, message_ids=dict(task.mids), refs=task.refs or None, sent=dict(task.sent),
        quoted=task.quoted,
    )  # fmt: skip
    current: str | None = None
    for event in events:
        if isinstance(event, TurnStarted):
            current = event.turn_id if event.turn_id in turn_ids else None
        if current is None:
            continue
        t = turns.get(current)
        ts = (t.ended_at or t.started_at) if t is not None and isinstance(event, TurnEnded) else (t.started_at if t else time.time())
        projector.feed(event, ts)
        if isinstance(event, TurnEnded):
            current = None
    if current is not None or projector.current_turn is not None:
        # The daemon stopped in the middle of this turn: it will never end now.
        last = projector.current_turn or turn_ids[-1]
        error = TurnError(message="the bridge stopped while this task was running", kind="interrupted")
        t = turns.get(last)
        projector.feed(TurnEnded(turn_id=last, stop_reason=StopReason.FAILED, error=error), (t.started_at if t else time.time()))
    if task.state == _S.CANCELED and projector.state in s.INTERRUPTED_STATES:
        projector.feed_canceled(float(task.ts or time.time()))  # canceled while it waited
    return record.session_id, projector


async def list_tasks(service: Any, route: str, req: s.ListTasksRequest) -> s.ListTasksResponse:
    size = req.page_size if req.page_size is not None else 50
    if not 1 <= size <= 100:
        raise InvalidParams(f"pageSize must be between 1 and 100, got {size}")
    try:
        offset = int(req.page_token) if req.page_token else 0
    except ValueError:
        raise InvalidParams(f"invalid pageToken {req.page_token!r}") from None
    if offset < 0:
        raise InvalidParams(f"invalid pageToken {req.page_token!r}")
    if req.status and req.status not in _STATES:
        raise InvalidParams(f"status must be one of {sorted(_STATES)}, got {req.status!r}")
    if req.history_length is not None and req.history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    after = _parse_time(req.status_timestamp_after) if req.status_timestamp_after else -math.inf
    rows = [r for r in await _rows(service, route, req.context_id) if (not req.status or r[2] == req.status) and r[1] > after]
    rows.sort(key=lambda r: (-r[1], r[0]))
    page = rows[offset : offset + size]
    tasks = []
    for task_id, _, _ in page:
        projector = await service.task(route, task_id)
        tasks.append(projector.snapshot(history_length=req.history_length, include_artifacts=bool(req.include_artifacts)))
    more = offset + size < len(rows)
    return s.ListTasksResponse(tasks=tasks, next_page_token=str(offset + size) if more else "", page_size=size, total_size=len(rows))

async def _rows(service: Any, route: str, context_id: str | None) -> list[tuple[str, float, str]]:
    """(task id, status time, state) of every task of the route (or of one context)."""
    for live in list(service.live.values()):  # running tasks' records, if not flushed yet
        await live.session.flush()
    if context_id:
        try:
            primary = await service._primary(route, context_id)
        except NotFound:
            return []
        sids = [context_id, *primary.front_state(A2AContext).side]
    else:
        sids = []
        offset = 0
        while True:
            records, total = await service.manager.store.list_sessions(route=route, limit=500, offset=offset)
            sids += [r.session_id for r in records if context_of(service.manager, r.session_id, r) is not None]
            offset += len(records)
            if not records or offset >= total:
                break
    rows: list[tuple[str, float, str]] = []
    for sid in sids:
        session = service.manager.live(sid)
        record = session.record if session is not None else await service.manager.store.get_session(sid)
        if record is None:
            continue
        state = context_of(service.manager, sid, record) or A2AContext()
        cont = state.cont
        stored = state.tasks
        for turn in await service.manager.store.list_turns(sid):
            if turn.turn_id in cont:
                continue
            live = service.live.get(turn.turn_id)
            cached = service._recent.get(turn.turn_id)
            if live is not None or cached is not None:
                p = live.projector if live is not None else cached[2]  # type: ignore[index]
                rows.append((turn.turn_id, p.timestamp, p.state))
            elif turn.turn_id in stored and stored[turn.turn_id].state is not None:
                t = stored[turn.turn_id]
                rows.append((turn.turn_id, float(t.ts or turn.started_at), str(t.state)))
            else:  # never ended where we could see it: the daemon stopped during it
                rows.append((turn.turn_id, turn.ended_at or turn.started_at, _S.FAILED))
    return rows


_STATES = frozenset(v for k, v in vars(s.TaskState).items() if k.isupper() and k != "UNSPECIFIED")


def _parse_time(value: str) -> float:
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InvalidParams(f"statusTimestampAfter must be an RFC 3339 timestamp, got {value!r}") from None
