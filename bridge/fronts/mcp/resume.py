"""Resumable MCP streams: each Streamable HTTP session's own bounded event store.

MCP 2025-11-25 (Transports: Streamable HTTP, "Resumability and Redelivery"): a server
may give each SSE event an `id`; a client whose stream was cut sends a GET with
`Last-Event-ID` and gets what came after it on that stream, then the rest live. The
SDK does that with an `EventStore`, and its client resumes by itself when a POST's
stream ends before the answer. So a `tools/call` whose connection drops mid-turn still
gets its progress and its answer.

The SDK hands one store to every session and names a stream by the JSON-RPC id of its
request (or one fixed name for the GET stream), so two sessions' streams share names
(every client numbers from 0): a shared store would replay one session's messages to
another. Here each session gets a store of its own (`scoped_manager` sets it as the
SDK makes the session's transport), which knows only that session's events, so a
`Last-Event-ID` can only ever name one of them. The manager's own store, used should a
release of the SDK make transports some other way, keeps nothing: resumption is then
off, never shared.

Bounded: the newest `limit` events of a session (`[mcp] resume_events`); a
`Last-Event-ID` older than those (or not ours) replays nothing, and the SDK's client
gives up after its retries with an error. The store goes with its session.

One window is closed here rather than in the SDK: after a replay the SDK registers the
resumed stream only after it has written the stream's first event, so a message routed
in between would be stored but not sent. A message for a stream being resumed waits
(briefly, bounded) for that registration before the SDK routes it.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import trio
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

__all__ = ["Nothing", "SessionEvents", "scoped_manager"]

log = logging.getLogger("bridge.fronts.mcp.front")

_MAX_ID_CHARS = 20  # a Last-Event-ID we wrote is a decimal count
_REGISTER_WAIT_S = 1.0  # how long a message waits for its resumed stream to be registered
_MAX_STREAMS = 1024  # streams whose run is remembered (a session has far fewer in flight)


class Nothing(EventStore):
    """The manager's store: keeps nothing, so resumption is off unless a session has its own."""

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        return "0"

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        return None


class SessionEvents(EventStore):
    """One session's newest `limit` events: (number, stream, run, message or None for a
    priming event). The SDK names a POST's stream by its request's id, which a client
    may use again once the request is answered: a stream's run is the number of the
    priming event its request began with, so a replay never reaches into a later
    request that had the same id."""

    def __init__(self, limit: int, transport: Any) -> None:
        self._events: deque[tuple[int, StreamId, int, Any]] = deque(maxlen=limit)
        self._count = 0
        self._runs: dict[StreamId, int] = {}  # stream → its current run (newest _MAX_STREAMS)
        self._transport = transport  # the session's (to see when a resumed stream is registered)
        self._resuming: dict[StreamId, float] = {}  # stream → until when its messages wait for it

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        self._count += 1
        n = self._count
        resuming = self._resuming.get(stream_id, 0.0) > trio.current_time()
        if message is None and not resuming:  # a request's first event: a new run
            self._runs.pop(stream_id, None)
            self._runs[stream_id] = n
            if len(self._runs) > _MAX_STREAMS:
                del self._runs[next(iter(self._runs))]
        self._events.append((n, stream_id, self._runs.get(stream_id, 0), message))
        if resuming and message is not None:
            await self._registered(stream_id, self._resuming[stream_id])
        return str(n)

    def knows(self, last_event_id: str) -> bool:
        """Whether a replay after `last_event_id` can start: one of the events kept."""
        return self._find(last_event_id) is not None

    def _find(self, last_event_id: str) -> tuple[int, StreamId, int] | None:
        if not (0 < len(last_event_id) <= _MAX_ID_CHARS and last_event_id.isascii() and last_event_id.isdigit()):
            return None
        after = int(last_event_id)
        if not self._events or not self._events[0][0] <= after <= self._events[-1][0]:
            return None
        n0 = self._events[0][0]  # numbers are consecutive: the event is at after - n0
        _, stream, run, _ = self._events[after - n0]
        return after, stream, run

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        found = self._find(last_event_id)
        if found is None:  # not ours, or older than what is kept
            return None
        after, stream, run = found
        sent = after
        while True:  # again until nothing new: what is stored while we send is sent too
            first = self._events[0][0]
            if sent + 1 < first:  # the rest was let go while this client read slowly
                return None  # its next try is refused (410): an error, not a gap
            batch = [e for e in list(self._events)[sent + 1 - first :] if e[1] == stream and e[2] == run]
            sent = self._events[-1][0]
            if not batch:
                break
            for n, _, _, message in batch:
                if message is not None:
                    await send_callback(EventMessage(message, str(n)))
        # No await since the last look: from here the SDK writes the priming event (on the
        # same run) and registers the stream; a message routed meanwhile waits for that.
        self._resuming.pop(stream, None)
        self._resuming[stream] = trio.current_time() + _REGISTER_WAIT_S
        if len(self._resuming) > _MAX_STREAMS:
            del self._resuming[next(iter(self._resuming))]
        return stream

    async def _registered(self, stream_id: StreamId, until: float) -> None:
        streams = getattr(self._transport, "_request_streams", None)  # the SDK's, private
        while isinstance(streams, dict) and stream_id not in streams and trio.current_time() < until:
            await trio.sleep(0.001)
        self._resuming.pop(stream_id, None)


def scoped_manager(manager_class: type, limit: int) -> type:
    """The SDK's session manager, giving each session's transport a `SessionEvents`."""

    class ScopedManager(manager_class):  # type: ignore[misc, valid-type]
        def _admit_session(self, requestor: Any) -> Any:  # the SDK's, private: where it makes a transport
            transport = super()._admit_session(requestor)
            if transport is not None and hasattr(transport, "_event_store"):
                transport._event_store = SessionEvents(limit, transport)
            return transport

    return ScopedManager
