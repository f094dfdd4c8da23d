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

Bounded: a session keeps its newest `[mcp] resume_events` events, at most
`resume_bytes` of them (as JSON), and all sessions together at most `_TOTAL_BUDGETS`
times that; an event that does not fit is not kept, and a replay that would need it
refuses (as for an id too old) rather than leave a gap. An id that is not kept is
refused (410, bridge/fronts/mcp/streamable_http.py), except the newest event of its
stream: nothing came after it, so the stream resumes with nothing to replay (a quiet
notification stream cut long after its last event). The store goes with its session.

Runs: the SDK names a POST's stream by its request's id, which a client may use again
once it is answered, so each stream's run is the number of the priming event its
request began with, and a replay keeps to the run of the id it resumes.

One window is closed here rather than in the SDK: after a replay the SDK registers the
resumed stream only after it has written that stream's priming event, so a message
routed in between would be stored but not sent. A message for a stream being resumed
waits for that registration (polled, at most `_REGISTER_WAIT_S`) before the SDK routes
it; a client that does not take the priming event for that long has its message kept
for its next resume.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from typing import Any

import trio
from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import jsonrpc_message_adapter

__all__ = ["Budget", "Nothing", "SessionEvents", "scoped_manager"]

log = logging.getLogger("bridge.fronts.mcp.front")

_MAX_ID_CHARS = 20  # a Last-Event-ID we wrote is a decimal count
_REGISTER_WAIT_S = 5.0  # how long a message waits for its resumed stream to be registered
_REGISTER_POLL_S = 0.01
_TOTAL_BUDGETS = 64  # all sessions together keep at most this many sessions' `resume_bytes`
_DROPPED = object()  # an event that did not fit: a replay that needs it refuses


class Budget:
    """The bytes every session's store keeps, together (one per session manager). Over
    it, room is made in the store that holds the most, so no session (nor one caller's
    many) keeps the others from resuming."""

    __slots__ = ("cap", "used", "stores")

    def __init__(self, cap: int) -> None:
        self.cap, self.used = cap, 0
        self.stores: weakref.WeakSet[SessionEvents] = weakref.WeakSet()

    def make_room(self, size: int) -> None:
        while self.used + size > self.cap:
            largest = max(self.stores, key=lambda st: st._bytes, default=None)
            if largest is None or not largest._bytes:
                return
            while largest._bytes and self.used + size > self.cap:
                largest._forget_oldest()


class Nothing(EventStore):
    """The manager's store: keeps nothing, so resumption is off unless a session has its own."""

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        return "0"

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        return None


class SessionEvents(EventStore):
    """One session's newest events: (number, stream, run, JSON; None for a priming event,
    `_DROPPED` for one not kept), consecutive numbers from `_count`."""

    def __init__(self, limit: int, max_bytes: int, budget: Budget, transport: Any) -> None:
        self._events: deque[tuple[int, StreamId, int, Any]] = deque()
        self._limit, self._max_bytes, self._budget = limit, max_bytes, budget
        self._bytes = 0
        self._warned = False
        self._count = 0
        # stream → [run, its newest event's number], the most recently active last: a
        # stream with an event still kept is among the newest `limit` (bounded so; the
        # notification stream is kept whatever its age).
        self._streams: dict[StreamId, list[int]] = {}
        self._newest: dict[int, StreamId] = {}  # a stream's newest event number → the stream
        self._transport = weakref.ref(transport)  # to see when a resumed stream is registered
        self._priming_resumed: StreamId | None = None  # the stream whose priming the SDK writes next
        self._resuming: dict[StreamId, float] = {}  # stream → until when its messages wait for it
        budget.stores.add(self)

    def __del__(self) -> None:
        self._budget.used -= self._bytes  # the session is gone: its bytes are free

    # -- storing ---------------------------------------------------------------------------
    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        self._count += 1
        n = self._count
        entry = self._streams.pop(stream_id, None)
        if message is None and self._priming_resumed != stream_id:
            entry = [n, n]  # a request's first event: a new run
        elif entry is None:
            entry = [0, n]  # a stream seen before the newest `limit`: no run to tell apart
        self._priming_resumed = None
        self._newest.pop(entry[1], None)
        entry[1] = n
        self._streams[stream_id] = entry
        self._newest[n] = stream_id
        if len(self._streams) > self._limit + 1:  # the notification stream is always remembered
            old = next(k for k in self._streams if k != GET_STREAM_KEY)
            self._newest.pop(self._streams.pop(old)[1], None)
        self._keep(n, stream_id, entry[0], message)
        until = self._resuming.get(stream_id)
        if until is not None and message is not None:
            await self._registered(stream_id, until)
        return str(n)

    def _keep(self, n: int, stream_id: StreamId, run: int, message: Any) -> None:
        data: Any = None
        size = 0
        if message is not None:
            try:
                data = message.model_dump_json(by_alias=True, exclude_unset=True)  # as the SDK writes it
                size = len(data)
            except Exception:  # the SDK writes it, or fails, on its own: here it is only not kept
                log.exception("MCP: an event could not be kept to resume from")
                data, size = _DROPPED, 1 << 62
        fits = size <= self._max_bytes  # else it is not kept, and nothing is let go for it
        while self._events and (len(self._events) >= self._limit or (fits and self._bytes + size > self._max_bytes)):
            self._forget_oldest()
        if fits:
            self._budget.make_room(size)
        if not fits or self._budget.used + size > self._budget.cap:
            if not self._warned:  # once a session: a client may make many
                self._warned = True
                log.warning("MCP: an event of %s bytes is not kept to resume from (over [mcp] resume_bytes, or all "
                            "sessions' share); a stream cut before it cannot resume", size if fits or size < 1 << 62 else "?")  # fmt: skip
            data, size = _DROPPED, 0  # it does not fit (others hold the rest): said, not skipped
        self._events.append((n, stream_id, run, data))
        self._bytes += size
        self._budget.used += size

    def _forget_oldest(self) -> None:
        _, _, _, data = self._events.popleft()
        if isinstance(data, str):
            self._bytes -= len(data)
            self._budget.used -= len(data)

    # -- resuming ----------------------------------------------------------------------------
    def knows(self, last_event_id: str) -> bool:
        """Whether a replay after `last_event_id` can be whole: one of the events kept (or
        the newest of its stream), with none of its stream's later events left out."""
        return self.stream_of(last_event_id) is not None

    def _find(self, last_event_id: str) -> tuple[int, StreamId, int] | None:
        if not (0 < len(last_event_id) <= _MAX_ID_CHARS and last_event_id.isascii() and last_event_id.isdigit()):
            return None
        after = int(last_event_id)
        if self._events and self._events[0][0] <= after <= self._events[-1][0]:
            n, stream, run, _ = self._events[after - self._events[0][0]]  # numbers are consecutive
            return (after, stream, run) if n == after else None
        stream = self._newest.get(after)
        if stream is None:
            return None
        return after, stream, self._streams[stream][0]

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        found = self._find(last_event_id)
        if found is None:  # not ours, or older than what is kept
            return None
        after, stream, run = found
        sent = after
        while True:  # again until nothing new: what is stored while we send is sent too
            batch = []
            for n, s, r, data in list(self._events):
                if n <= sent or s != stream or r != run:
                    continue
                if data is _DROPPED:
                    return None  # it was not kept: refuse (410 on the next try), never a gap
                batch.append((n, data))
            known = self._streams.get(stream)
            if self._events and sent + 1 < self._events[0][0] and (known is None or known[1] > sent):
                return None  # events of this stream after `sent` were (or may have been) let go while this client read
            sent = self._count
            if not batch:
                break
            for n, data in batch:
                if data is not None:
                    await send_callback(EventMessage(jsonrpc_message_adapter.validate_json(data, by_name=False), str(n)))
        # No await since the last look: the SDK now writes the stream's priming event (same
        # run) and registers the stream; a message routed meanwhile waits for that.
        self._priming_resumed = stream
        self._resuming.pop(stream, None)
        self._resuming[stream] = trio.current_time() + _REGISTER_WAIT_S
        if len(self._resuming) > self._limit:
            del self._resuming[next(iter(self._resuming))]
        return stream

    def stream_of(self, last_event_id: str) -> StreamId | None:
        """The stream a `Last-Event-ID` resumes, if a replay after it can be whole."""
        found = self._find(last_event_id)
        if found is None:
            return None
        after, stream, run = found
        if any(n > after and s == stream and r == run and data is _DROPPED for n, s, r, data in self._events):
            return None  # one of what it missed was not kept
        return stream

    async def _registered(self, stream_id: StreamId, until: float) -> None:
        transport = self._transport()
        streams = getattr(transport, "_request_streams", None)  # the SDK's, private
        while isinstance(streams, dict) and stream_id not in streams and trio.current_time() < until:
            await trio.sleep(_REGISTER_POLL_S)
        self._resuming.pop(stream_id, None)


def scoped_manager(manager_class: type, limit: int, max_bytes: int) -> type:
    """The SDK's session manager, giving each session's transport a `SessionEvents`."""
    budget = Budget(max_bytes * _TOTAL_BUDGETS)

    class ScopedManager(manager_class):  # type: ignore[misc, valid-type]
        def _admit_session(self, requestor: Any) -> Any:  # the SDK's, private: where it makes a transport
            transport = super()._admit_session(requestor)
            if transport is not None and hasattr(transport, "_event_store"):
                transport._event_store = SessionEvents(limit, max_bytes, budget, transport)
            return transport

    return ScopedManager
