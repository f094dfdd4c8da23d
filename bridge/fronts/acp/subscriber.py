"""A session attached to one ACP connection: the subscriber that feeds its events to it.

Attaching subscribes at once, so nothing the session emits is lost, but holds what
arrives until `release`: `session/load` first replays the history (ACP schema,
`session/load`: the agent streams the whole conversation back as `session/update`
notifications, then answers), and only what is newer than the replay follows it.
Backpressure is the connection's outbox: the session waits while it is congested
(`Subscriber`, bridge/session.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

from bridge.core.events import Event
from bridge.fronts.acp.editor import EditorServices
from bridge.session import Session
from bridge.transport.ndjson import Outbox

__all__ = ["AttachedSession", "Deliver"]

# The connection's projection of one event onto the wire (`AcpConnection.deliver`).
Deliver = Callable[[Session, Event], None]


class AttachedSession:
    """A session this connection is attached to, and the subscriber feeding it."""

    protocol: ClassVar[str] = "acp"

    def __init__(self, session: Session, *, deliver: Deliver, outbox: Outbox, services: EditorServices) -> None:
        self.session = session
        self.services = services
        self._deliver = deliver
        self._outbox = outbox
        self.holding: list[Event] | None = []  # events that arrive during a replay
        self._unsubscribe = session.subscribe(self)
        session.client_services = services  # the editor's files and terminals

    def unsubscribe(self) -> None:
        self._unsubscribe()
        if self.session.client_services is self.services:
            self.session.client_services = None

    def deliver(self, event: Event) -> None:
        if self.holding is not None:
            self.holding.append(event)
        else:
            self._deliver(self.session, event)

    def release(self, after_seq: int) -> None:
        """Stop holding: deliver what was held after `after_seq`, then every event as it comes."""
        held, self.holding = self.holding or [], None
        for event in held:
            if event.seq > after_seq:
                self._deliver(self.session, event)
        # From now on events go straight to the connection: one call less per event.
        self.deliver = functools.partial(self._deliver, self.session)  # type: ignore[method-assign]

    def congested(self) -> bool:
        return self._outbox.congested()

    async def wait_uncongested(self) -> None:
        await self._outbox.wait_uncongested()
