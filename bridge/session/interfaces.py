"""What a session calls out to: its subscribers (the fronts' clients) and its observer (metrics).

A `Subscriber` hears every event of a session, in order, synchronously (bridge/session/live.py
`Session.subscribe`); it declares the front it belongs to as `protocol` ("acp", "a2a",
"chat", "mcp", or "cli" for `agent-bridge ask`), the label of the events-relayed metric
(bridge/metrics.py). A `TurnObserver` (bridge/metrics.py) is told of sessions, turns and
back errors once each, and of delivered events once per store flush, never per event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from bridge.core.events import Event

__all__ = ["Subscriber", "TurnObserver", "protocol_of", "tell_broken", "wait_subscribers"]

log = logging.getLogger("bridge.session")


class Subscriber(Protocol):
    """Also, optionally, `broken() -> None`: called once if its `deliver` raised (it has
    then been unsubscribed), so it can tell its client and let go."""

    protocol: ClassVar[str]  # its front's name: the metric label

    def deliver(self, event: Event) -> None:
        """Called for every event, in order; must not block."""

    def congested(self) -> bool: ...

    async def wait_uncongested(self) -> None: ...


def protocol_of(sub: Subscriber) -> str:
    """`sub`'s front, read once when it subscribes. A class that does not declare it yet
    (a front not updated to the declaration) counts as "unknown", not as a guess; a
    wrapper (bridge/session/remote.py `_Gate`) answers for the subscriber it wraps."""
    declared = getattr(type(sub), "protocol", None)
    if isinstance(declared, str):
        return declared
    wrapped = getattr(sub, "protocol", None)
    return wrapped if isinstance(wrapped, str) else "unknown"


def tell_broken(sub: Subscriber, session_id: str) -> None:
    """Tell a subscriber that raised (and was unsubscribed) through its optional `broken()`."""
    broken = getattr(sub, "broken", None)
    if callable(broken):
        try:
            broken()
        except Exception:
            log.exception("session %s: a failed subscriber could not be told", session_id)


async def wait_subscribers(subs: Sequence[Subscriber], failed: Callable[[Subscriber, int | None], None]) -> None:
    """Until no subscriber is congested (backpressure); one that raises goes to `failed`."""
    for sub in subs:
        try:
            if sub.congested():
                await sub.wait_uncongested()
        except Exception:
            failed(sub, None)


class TurnObserver(Protocol):
    """Told of what happens, for metrics; each call is cheap and never blocks."""

    def session_opened(self, route: str) -> None: ...

    def turn_ended(
        self, route: str, outcome: str, seconds: float, first_event_s: float | None, *, trace: dict[str, str] | None = None
    ) -> None:
        """`trace`: the turn's trace ids, an exemplar for the histograms (bridge/telemetry `exemplar`)."""


    def back_failed(self, route: str, kind: str) -> None: ...

    def events_delivered(self, protocol: str, count: int) -> None: ...

    def turn_refused(self, route: str, reason: str, front: str) -> None:
        """A turn refused by `[limits]` (bridge/session/limits.py)."""
