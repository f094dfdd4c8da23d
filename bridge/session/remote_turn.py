"""What a remote session (bridge/session/remote.py) is made of: the turn it mirrors
from the events it follows, and what it needs of the session manager."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import trio

from bridge.cluster.base import Cluster
from bridge.core.content import ContentBlock
from bridge.core.events import Event, Question, TurnEnded
from bridge.session.changes import Changes
from bridge.session.supervised import SupervisedNursery
from bridge.store import Store, TurnRecord

__all__ = ["FollowerHost", "RemoteTurn"]

log = logging.getLogger("bridge.session")


class FollowerHost(Protocol):
    """What a remote session needs of the session manager."""

    store: Store
    cluster: Cluster
    changes: Changes
    accepting: bool
    refusal: str

    def lend_nursery(self) -> SupervisedNursery: ...

    async def read_events(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]: ...

    def event_pages(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> AsyncIterator[list[Event]]: ...

    async def rehome(self, remote: Any, *, gone: bool = False) -> None: ...


class RemoteTurn:
    """A turn running on another instance, as its events show it (the `Turn` surface a front uses)."""

    def __init__(self, record: TurnRecord) -> None:
        self.turn_id = record.turn_id
        self.record = record
        self.started_at = record.started_at
        self.first_seq = record.first_seq
        self.stream_seq = record.stream_seq
        self.prompt: list[ContentBlock] = []
        self.message_id: str | None = None
        self.message_meta: dict[str, Any] | None = None
        self.ended: TurnEnded | None = None
        self.cancel_requested = False
        self._questions: dict[str, Question] = {}
        self._done = trio.Event()
        self._on_done: list[Callable[[], None]] = []

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def open_question(self, question_id: str) -> Question | None:
        return self._questions.get(question_id)

    async def wait(self) -> TurnEnded:
        await self._done.wait()
        assert self.ended is not None
        return self.ended

    def when_done(self, callback: Callable[[], None]) -> None:
        if self._done.is_set():
            callback()
        else:
            self._on_done.append(callback)

    def _end(self, event: TurnEnded) -> None:
        if self._done.is_set():
            return
        self.ended = event
        self._questions.clear()
        self._done.set()
        callbacks, self._on_done = self._on_done, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a front's callback: its bug, nobody else's
                log.exception("turn %s: a when_done callback failed", self.turn_id)
