"""SubscribeToTask streams on an interrupted task whose turn is over, until a message continues it.

A subscriber stays open until its task is terminal (A2A spec §3, SubscribeToTask), through
INPUT_REQUIRED: between the turn that asked and the one that carries the task on, nothing
runs, so its stream waits here. Each is bounded and released:

- at most `[a2a] max_subscribers_per_task` per task and `max_waiting_subscribers` in all;
  over either, SubscribeToTask is refused with `Overloaded` (A2A has no resource-limit
  error: -32603 with the reason, HTTP+JSON 503, as for the live-session caps);
- the next turn of the task takes them (`take`); CancelTask ends them after its CANCELED;
- the task's session closing (deleted, its route removed, the daemon stopping) and the
  daemon's stop (`SessionManager.before_close`) end them.

Ending one is clean in both dialects: the task's status as it is (still INPUT_REQUIRED,
resumable), which 0.3 marks `final: true`, then the end of the response (1.0 has no
`final`: the stream's end says it).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from bridge.codecs.a2a_task import TaskProjector
from bridge.errors import Overloaded
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.fronts.a2a.stream import SseStream
from bridge.schema import a2a as s

__all__ = ["WaitingStreams"]

log = logging.getLogger("bridge.fronts.a2a.front")


class _Waiting:
    __slots__ = ("projector", "streams", "scope")

    def __init__(self, projector: TaskProjector) -> None:
        self.projector = projector
        self.streams: list[SseStream] = []
        self.scope: trio.CancelScope | None = None  # the watch on its session's close


class WaitingStreams:
    def __init__(self, cfg: A2AFrontConfig, manager: Any) -> None:
        self.cfg = cfg
        self._tasks: dict[str, _Waiting] = {}
        self.count = 0
        manager.before_close.append(self.finish)

    def check(self, task_id: str, *, running: int = 0) -> None:
        """`Overloaded` when one more subscriber of `task_id` (with `running` on its live turn) is over a bound."""
        w = self._tasks.get(task_id)
        if (len(w.streams) if w is not None else 0) + running >= self.cfg.max_subscribers_per_task:
            raise Overloaded(f"task {task_id} has {self.cfg.max_subscribers_per_task} subscribers already "
                             "([a2a] max_subscribers_per_task): close one, or GetTask it")  # fmt: skip
        if self.count >= self.cfg.max_waiting_subscribers:
            raise Overloaded(f"{self.count} subscribers wait on interrupted tasks ([a2a] max_waiting_subscribers): try again later")

    def add(self, projector: TaskProjector, stream: SseStream, session: Any) -> None:
        """`stream` (which has the task as it is) waits for the task's next turn; over a bound, or
        with its session closed, it ends now. `session`: the task's live session, if it is live."""
        task_id = projector.task_id
        if stream.closed:  # its client left (or it was revoked) before it came to wait: nothing to hold
            return
        try:
            self.check(task_id)
        except Overloaded as exc:
            log.warning("A2A SubscribeToTask stream of task %s ended: %s", task_id, exc.message)
            _end(stream, projector, None)
            return
        w = self._tasks.get(task_id)
        if w is None:
            w = self._tasks[task_id] = _Waiting(projector)
            if session is not None:
                if session.closed:
                    del self._tasks[task_id]
                    _end(stream, projector, None)
                    return
                w.scope = trio.CancelScope()
                session.shared_nursery.start_soon(self._watch, task_id, w, session)
        w.streams.append(stream)
        self.count += 1

        def gone(st: SseStream) -> None:  # its client left
            if st in w.streams:
                w.streams.remove(st)
                self.count -= 1
            if not w.streams and self._tasks.get(task_id) is w:
                self._release(task_id)

        stream.on_close = gone

    def take(self, task_id: str) -> list[SseStream]:
        """The task's waiting streams, no longer counted here (its next turn carries them on)."""
        w = self._release(task_id)
        if w is None:
            return []
        for st in w.streams:
            st.on_close = None
        self.count -= len(w.streams)
        return w.streams

    def end(self, task_id: str, event: s.StreamResponse | None = None) -> None:
        """End the task's waiting streams: after `event`, else after the task's status as it is."""
        w = self._tasks.get(task_id)
        for stream in self.take(task_id):
            _end(stream, w.projector if w is not None else None, event)

    async def finish(self) -> None:
        """The daemon stops: every waiting stream ends now, so the listener can close."""
        if self.count:
            log.info("stopping: %d SubscribeToTask stream(s) waiting on interrupted tasks ended", self.count)
        for task_id in list(self._tasks):
            self.end(task_id)

    def _release(self, task_id: str) -> _Waiting | None:
        w = self._tasks.pop(task_id, None)
        if w is not None and w.scope is not None:
            w.scope.cancel()
        return w

    async def _watch(self, task_id: str, w: _Waiting, session: Any) -> None:
        assert w.scope is not None
        with w.scope:
            await session.wait_closed()
            if self._tasks.get(task_id) is w:
                log.info("A2A task %s: its session closed: %d waiting subscriber(s) ended", task_id, len(w.streams))
                self.end(task_id)


def _end(stream: SseStream, projector: TaskProjector | None, event: s.StreamResponse | None) -> None:
    if event is None and projector is not None:
        status = projector.snapshot(history_length=0, include_artifacts=False).status
        event = s.StreamResponse(status_update=s.TaskStatusUpdateEvent(task_id=projector.task_id, context_id=projector.context_id, status=status))
    if event is not None:
        stream.put(stream.encoder.frame(stream.encoder.payload(event)))
    stream.close()
