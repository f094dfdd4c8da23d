"""Which sessions changed: what a live list of sessions needs to stay current.

`Changes` (one per `SessionManager`, `manager.changes`) tells its listeners that a
session changed the way a listing shows it: created, a turn started or ended, a
question asked or answered, closed (`changed`), or deleted (`deleted`). It is told by
the session layer at those moments only, never per event of a turn, so the hot path
pays nothing; with no listener a call is a loop over an empty list.

A listener (the chat front's change feed, bridge/fronts/chat/feed.py) must not block:
it notes the session id in a bounded set of its own and writes later. One that raises
is our bug: it is logged and dropped, and nobody else notices (STYLE.md rule 17).

Partial in a cluster: a session that runs on another instance is heard of only while
this instance follows it (bridge/session/remote.py mirrors its turns); a client of the
feed refetches the list now and then for the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from bridge.store import SessionRecord

__all__ = ["ChangeListener", "Changes"]

log = logging.getLogger("bridge.session")


class ChangeListener(Protocol):
    def changed(self, session_id: str) -> None:
        """The session changed as a listing shows it; must not block."""

    def deleted(self, session_id: str, record: SessionRecord | None = None) -> None:
        """The session was deleted (`record`: what it was, for who may hear of it; None:
        not known); must not block."""


class Changes:
    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[ChangeListener] = []

    def __len__(self) -> int:
        return len(self._listeners)

    def listen(self, listener: ChangeListener) -> Callable[[], None]:
        """Hear of every change until the returned function is called."""
        self._listeners = [*self._listeners, listener]  # copy on write: a call may (un)listen

        def unlisten() -> None:
            self._listeners = [x for x in self._listeners if x is not listener]

        return unlisten

    def changed(self, session_id: str) -> None:
        for listener in self._listeners:
            try:
                listener.changed(session_id)
            except Exception:
                self._failed(listener)

    def deleted(self, session_id: str, record: SessionRecord | None = None) -> None:
        for listener in self._listeners:
            try:
                listener.deleted(session_id, record)
            except Exception:
                self._failed(listener)

    def _failed(self, listener: ChangeListener) -> None:
        log.exception("a change listener failed; dropped")
        self._listeners = [x for x in self._listeners if x is not listener]
