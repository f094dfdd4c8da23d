"""A2A tasks whose turn another instance runs (issue 17: several daemons on one store).

Each session's live turn runs on the one instance holding its lease; any other instance
reaches it through the `RemoteSession` the manager gives it (bridge/session/remote.py):
its events follow from the store, its commands are forwarded to the owner. A task
started through instance A may be answered, subscribed to or canceled through B, which
holds no `LiveTask` for it. `follow` makes one on B: the task's row says its session
and latest turn; when that turn runs now, the task is replayed from the stored events
(the owner stores what it holds first) while a buffer holds what the session delivers
meanwhile, and the `LiveTask` carries on from the last event read, so its streams see
every event once, in order, with no gap, until the task stops.

What the front changes in a task's row or a session's `A2AContext` is staged with the
session; on another instance's session it travels to the owner with `save_record` (a
`PutCmd`), which `RowForwarder` sends for each session one at a time, in order.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from bridge.core.events import Event
from bridge.errors import BridgeError
from bridge.fronts.a2a.read import replay_through
from bridge.fronts.a2a.stream import LiveTask
from bridge.session import SessionManager

__all__ = ["RowForwarder", "follow", "runs_here"]

log = logging.getLogger("bridge.fronts.a2a.front")


def runs_here(manager: SessionManager, session: Any) -> bool:
    """This instance runs `session` (what it stages is written with its next flush)."""
    return manager.live(session.id) is session


class _Buffer:
    """What a session delivers while a task is read from the store."""

    protocol: ClassVar[str] = "a2a"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def deliver(self, event: Event) -> None:
        self.events.append(event)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


async def follow(service: Any, route: str, task_id: str) -> LiveTask | None:
    """The task, running on another instance, followed here from now; None when no turn
    of it runs (or on a single instance, where every running task is in `service.live`)."""
    manager: SessionManager = service.manager
    if manager.cluster.solo:
        return None
    record = await manager.store.get_task(task_id)
    if record is None or record.route != route:
        return None
    turn_record = await manager.store.get_turn(record.turn_id)
    if turn_record is None or turn_record.last_seq is not None:
        return None  # its latest turn ended: nothing to follow (or not stored yet: nothing to find)
    session = await manager.get(record.session_id)
    if runs_here(manager, session):
        return None  # then a turn of it running would be in `service.live`: this one was cut off
    turn = session.turn if session.turn is not None and session.turn.turn_id == record.turn_id else None
    buffer = _Buffer()
    unsubscribe = session.subscribe(buffer)  # before the read: nothing falls between the two
    try:
        kept, through = await replay_through(manager, route, task_id, record, session=session)
        live = service.live.get(task_id)
        if live is not None:  # followed meanwhile by another request: one copy
            return live
        if kept.projector.current_turn is None:
            return None  # it ended as it was read
        live = LiveTask(session, kept, turn, on_state=service._state_changed, on_end=service._ended)
        live.handoff = lambda stream: service.waiting.add(kept.projector, stream, session)
        service.live[task_id] = live
        service._recent.pop(task_id, None)
        live.resume(buffer.events, through)  # subscribed before the buffer lets go
        return live
    finally:
        unsubscribe()


class RowForwarder:
    """Staged rows and front states of sessions other instances run, sent to their owners."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        self._sending: dict[str, bool] = {}  # session id → staged again while a send was out

    def staged(self, session: Any) -> None:
        """`session` has something staged: on another instance's session, send it soon."""
        if runs_here(self.manager, session):
            return  # written with its next flush
        if session.id in self._sending:
            self._sending[session.id] = True
            return
        self._sending[session.id] = False
        session.shared_nursery.start_soon(self._send, session)

    async def _send(self, session: Any) -> None:
        try:
            while True:
                try:
                    await session.save_record()
                except BridgeError as exc:  # its owner gone: the next owner's turn ends cut, and says so
                    log.warning("A2A session %s: task rows not sent to its instance: %s", session.id, exc.message)
                if not self._sending[session.id]:
                    return
                self._sending[session.id] = False
        finally:
            del self._sending[session.id]
