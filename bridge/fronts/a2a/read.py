"""A2A tasks read back from the store: GetTask of a task no longer held in memory, and ListTasks.

`replay` re-projects one task from its row (bridge/store/base.py `TaskRecord`) and its own
turns: it reads only the events in (its first turn's `first_seq` − 1, its last turn's
`last_seq`], fed to a `TaskProjector` with the turns' times, so its cost does not depend
on the session's other turns (issue 16). A turn the daemon stopped in the middle of
never ends: it reads as FAILED. A task of another route, or an id with no row (a turn
of a session no A2A client made, a continuation turn's own id), is an unknown task.

`list_tasks` (A2A spec §3.1.4, ListTasks): one page of the store's task rows, the route's
or one context's (`Store.list_tasks`: newest status time first, ties by id, the `status`
and `statusTimestampAfter` filters in the store), after the page token: a cursor, as
the spec asks, the base64url JSON pair (status time, task id) of the page before's last
task. A running task's row has the time of its last change of state. Each task's
snapshot comes from the live task, the service's recent ones, or `replay`.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from typing import Any

import msgspec

from bridge.codecs.a2a_task import TaskProjector
from bridge.core.events import StopReason, TurnEnded, TurnError, TurnStarted
from bridge.errors import InvalidParams, NotFound
from bridge.fronts.a2a.state import Kept, decode_task
from bridge.schema import a2a as s
from bridge.session import SessionManager
from bridge.store import TaskRecord, TurnRecord
from bridge.store.listing import Visible

__all__ = ["list_tasks", "replay", "replay_through"]

_S = s.TaskState
_enc = msgspec.json.Encoder()
_CURSOR = msgspec.json.Decoder(tuple[float, str])


async def replay(manager: SessionManager, route: str, task_id: str, record: TaskRecord | None = None) -> Kept:
    """The task as its row and its turns' stored events say (`record`: its row, if read already)."""
    return (await replay_through(manager, route, task_id, record))[0]


async def replay_through(
    manager: SessionManager, route: str, task_id: str, record: TaskRecord | None = None, *, session: Any = None
) -> tuple[Kept, int]:
    """`replay`, and the last event it read. `session`: the task's, if got already. A turn
    that runs on another instance of a cluster is read as far as it went (that instance
    stores its events first), not as cut off."""
    if record is None:
        record = await manager.store.get_task(task_id)
    if record is None or record.route != route:
        raise NotFound(f"unknown task {task_id!r}")
    task, writable = decode_task(record.data)
    turn_ids = [task_id, *task.turns]
    turns: dict[str, TurnRecord] = {}
    for turn_id in turn_ids:  # the task's own turns only
        turn = await manager.store.get_turn(turn_id)
        if turn is not None:
            turns[turn_id] = turn
    first, last = turns.get(task_id), turns.get(turn_ids[-1])
    after = first.first_seq - 1 if first is not None else 0
    through = last.last_seq if last is not None else None  # None while it runs
    session = session or manager.live(record.session_id)
    if session is None and first is not None and through is None and not manager.cluster.solo:
        session = await manager.get(record.session_id)  # its turn runs, here or on another instance
    # Read after the owner stored what it holds, a turn with no end is running there (or its
    # instance stopped and the cluster closes it soon); here, only if it is our running one.
    running = session is not None and (
        manager.live(session.id) is not session
        or (session.busy and session.turn is not None and session.turn.turn_id == turn_ids[-1])
    )
    if first is None:  # its first turn was never stored: no event of it either (never the session's whole log)
        events = []
    elif session is not None:
        events = await session.history(after, through_seq=through)
    else:
        events = await manager.read_events(record.session_id, after, through_seq=through)
    projector = TaskProjector(
        task_id, record.context_id, message_ids=task.mids, refs=task.refs or None, sent=task.sent, quoted=task.quoted
    )
    wanted = set(turn_ids)
    current: str | None = None
    for event in events:
        if isinstance(event, TurnStarted):
            current = event.turn_id if event.turn_id in wanted else None
        if current is None:
            continue
        t = turns.get(current)
        ts = (t.ended_at or t.started_at) if t is not None and isinstance(event, TurnEnded) else (t.started_at if t else time.time())
        projector.feed(event, ts)
        if isinstance(event, TurnEnded):
            current = None
    if (current is not None or projector.current_turn is not None) and not running:
        # The daemon stopped in the middle of this turn: it will never end now.
        cut = projector.current_turn or turn_ids[-1]
        error = TurnError(message="the bridge stopped while this task was running", kind="interrupted")
        t = turns.get(cut)
        projector.feed(TurnEnded(turn_id=cut, stop_reason=StopReason.FAILED, error=error), (t.started_at if t else time.time()))
    if record.state == _S.CANCELED and projector.state in s.INTERRUPTED_STATES:
        projector.feed_canceled(record.status_ts)  # canceled while it waited
    return Kept(record, task, projector, writable=writable), events[-1].seq if events else 0


async def list_tasks(service: Any, route: str, req: s.ListTasksRequest, visible: Visible | None = None) -> s.ListTasksResponse:
    size = req.page_size if req.page_size is not None else 50
    if not 1 <= size <= 100:
        raise InvalidParams(f"pageSize must be between 1 and 100, got {size}")
    cursor = _cursor(req.page_token) if req.page_token else None
    if req.status and req.status not in _STATES:
        raise InvalidParams(f"status must be one of {sorted(_STATES)}, got {req.status!r}")
    if req.history_length is not None and req.history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    after = _parse_time(req.status_timestamp_after) if req.status_timestamp_after else None
    for live in list(service.live.values()):  # running tasks' rows as they are now
        await live.session.flush()
    page = await service.manager.store.list_tasks(
        route=route, context_id=req.context_id or None, state=req.status or None, after_ts=after, limit=size, cursor=cursor,
        visible=visible,
    )
    tasks = []
    for record in page.tasks:
        kept = await service.kept(route, record.task_id, record=record)
        tasks.append(kept.projector.snapshot(history_length=req.history_length, include_artifacts=bool(req.include_artifacts)))
    token = base64.urlsafe_b64encode(_enc.encode(page.next)).decode().rstrip("=") if page.next is not None else ""
    return s.ListTasksResponse(tasks=tasks, next_page_token=token, page_size=size, total_size=page.total)


def _cursor(token: str) -> tuple[float, str]:
    """The (status time, task id) a page token carries; InvalidParams if it is not one of ours."""
    try:
        return _CURSOR.decode(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, msgspec.DecodeError):  # binascii.Error is a ValueError
        raise InvalidParams(f"invalid pageToken {token[:64]!r}") from None


_STATES = frozenset(v for k, v in vars(s.TaskState).items() if k.isupper() and k != "UNSPECIFIED")


def _parse_time(value: str) -> float:
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InvalidParams(f"statusTimestampAfter must be an RFC 3339 timestamp, got {value!r}") from None
