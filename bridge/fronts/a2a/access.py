"""[routes.NAME.access] on the A2A front: a context is a session, a task is in one.

A message starting a context needs `start` and makes the caller its owner (side
sessions of the context share that owner); a message to a context or an interrupted
task needs `use`, and `watch` of each task it references (their replies are quoted);
GetTask and SubscribeToTask `watch`; CancelTask and push configs `use`; ListTasks
leaves out the tasks of contexts the caller may not `list`, in the store's query
(bridge/fronts/owners.py `visibility`: full pages, its own total). The rules are
bridge/core/access.py's, asked through bridge/fronts/owners.py.
"""

from __future__ import annotations

from typing import Any

from bridge.config import Route
from bridge.core.access import Action
from bridge.core.identity import Identity
from bridge.errors import InvalidParams, NotFound
from bridge.fronts import owners

__all__ = ["TaskAccess"]

# referenceTaskIds a message may name on a route with rules (each is checked: a store read).
_MAX_REFS = 64


class TaskAccess:
    __slots__ = ("manager", "tasks")

    def __init__(self, manager: Any, tasks: Any) -> None:
        self.manager, self.tasks = manager, tasks

    async def allowed(self, name: str, route: Route, who: Identity, op: str, req: Any) -> dict[str, Any] | None:
        """Check the caller may do `op`; for a message starting a context, its owner meta."""
        if op in ("send", "stream"):
            msg = req.message
            refs = msg.reference_task_ids or ()
            if route.access is not None and len(refs) > _MAX_REFS:
                raise InvalidParams(f"referenceTaskIds: at most {_MAX_REFS} on this agent")
            for ref in refs:  # quoted to the agent: the caller must see them, else they are unknown
                await self._check_task(name, route, ref, who, "watch")
            if msg.task_id:
                await self._check_task(name, route, msg.task_id, who, "use")
            elif msg.context_id:
                await self._check_context(name, msg.context_id, who, "use")
            else:
                owners.check_start(self.manager.config, name, who)
            return owners.owned_by(who)
        task_id = {"get_task": "id", "cancel": "id", "subscribe": "id"}.get(op)
        if task_id is not None:
            await self._check_task(name, route, getattr(req, task_id), who, "watch" if op != "cancel" else "use")
        elif op.endswith("_push_config") or op == "list_push_configs":
            await self._check_task(name, route, getattr(req, "task_id", ""), who, "use")
        return None

    async def _check_task(self, name: str, route: Route, task_id: str, who: Identity, action: Action) -> None:
        if route.access is not None:  # `kept` answers only this route's tasks
            kept = await self.tasks.kept(name, task_id)  # NotFound: an unknown task
            try:
                await self._check_context(name, kept.record.session_id, who, action)
            except NotFound:  # said as for a task nobody has: never its context's id
                raise NotFound(f"unknown task {task_id!r}") from None

    async def _check_context(self, name: str, session_id: str, who: Identity, action: Action) -> None:
        """By the rules of the route the context is on, not of the URL it was sent to: a
        context of another route is unknown here, said as for an id nobody has (neither
        its existence nor its route is confirmed, and its session is not loaded)."""
        if not owners.ruled(self.manager.config):
            return
        live = self.manager.live(session_id)
        record = live.record if live is not None else await self.manager.store.get_session(session_id)
        unknown = NotFound(f"unknown contextId {session_id!r}: omit contextId to start a new conversation")
        if record is None or record.route != name:
            raise unknown
        try:
            owners.check(self.manager.config, record, who, action)
        except NotFound:
            raise unknown from None
