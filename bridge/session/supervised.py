"""`SupervisedNursery`: the session manager's nursery as lent to backs and fronts.

What a back or a front starts there (a webhook delivery, a reaper, an agent's reader)
runs beside every session, so it must not be able to end them: a task that raises is
logged and ends alone (STYLE.md rule 17).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["SupervisedNursery"]

log = logging.getLogger("bridge.session")


class SupervisedNursery:
    """The manager's nursery as lent to backs and fronts (`BackSession.shared_nursery`):
    what they start there cannot take the manager, and with it every session, down.

    A task that raises is logged (ERROR: ours to fix) and ends alone. With `start`, an
    exception raised before the task reports itself started still reaches the caller,
    whose own boundary (a turn, a request) turns it into that client's error.
    """

    __slots__ = ("_nursery",)

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @property
    def cancel_scope(self) -> trio.CancelScope:
        return self._nursery.cancel_scope

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        self._nursery.start_soon(self._guarded, fn, args, name=name or fn)

    async def start(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> Any:
        return await self._nursery.start(self._guarded, fn, args, name=name or fn)

    @staticmethod
    async def _guarded(
        fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        status = None if task_status is trio.TASK_STATUS_IGNORED else _StartedStatus(task_status)
        try:
            if status is None:
                await fn(*args)
            else:
                await fn(*args, task_status=status)
        except Exception:
            if status is not None and not status.reported:
                raise  # to the caller of `start`
            log.exception("a task a session lent the daemon's nursery failed; it ends alone")


class _StartedStatus:
    """A `task_status` that remembers whether the task reported itself started."""

    __slots__ = ("_inner", "reported")

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reported = False

    def started(self, value: Any = None) -> None:
        self.reported = True
        self._inner.started(value)
