"""A running A2A task and its SSE streams (A2A 1.0 `SendStreamingMessage` / `SubscribeToTask`, docs/specification.md).

`LiveTask` is a session subscriber for one task while a turn of it runs: each
canonical event goes through the task's `TaskProjector`, and every A2A event that
comes out is framed once per wire shape and queued on each attached stream,
synchronously and in the session's order, so several streams see the same events
in the same order. It never pauses the session (`congested()` is False): a stream
bounds its own queue and is dropped when its client is too slow; the task goes on.

`SseStream` is one SSE response (SendStreamingMessage, SubscribeToTask): frames
queued without awaiting, written by `run` in batches, one `http.response.body`
for everything waiting (STYLE.md rule 13: one body per event is ~100× slower than
batched bodies under hypercorn); a `: keepalive` comment when nothing was written for `heartbeat_s`;
`Cache-Control: no-cache` and `X-Accel-Buffering: no` so proxies do not buffer
(DESIGN.md complaint 1). A client that disconnects only ends its stream: the task
is not cancelled (A2A spec, streaming: a dropped stream does not cancel the task).
A2A has no resume token (A2A spec §3.1.6: `SubscribeToTaskRequest` names only the
task; its stream starts with the Task as it is, so nothing is lost between two
streams): frames carry no SSE `id:`, and a `Last-Event-ID` is not read.

A stream also ends when `until` returns (the caller's token expired, bridge/fronts/expiry.py):
what is queued is written, then the response ends as it does at a terminal state; so it
does when a reload's access rules refuse the caller the task (`revoke`). A2A
1.0 marks a stream's end by closing it (no `final` flag), and a client whose stream
closed before the task stopped calls SubscribeToTask (§3.1.6), here with a fresh
token, to have the task as it is and follow it on; the task itself is not touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import trio

from bridge.codecs.a2a_server import EventEncoder
from bridge.codecs.a2a_task import TaskProjector
from bridge.core.events import Event, TurnEnded
from bridge.fronts.a2a.state import Kept
from bridge.schema import a2a as s

__all__ = ["LiveTask", "SseStream"]

log = logging.getLogger("bridge.fronts.a2a.front")

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]

# SSE comments (WHATWG HTML §9.2.6: ignored by clients) saying why a stream ended early.
_DROPPED = b": dropped: this client fell behind; SubscribeToTask to resume\n\n"
_EXPIRED = b": token expired; SubscribeToTask with a fresh token to resume\n\n"
_REVOKED = b": access revoked: the agent's rules no longer let this caller follow the task\n\n"


class SseStream:
    """One SSE response; `put` from anywhere (never blocks), `run` in the request's task."""

    __slots__ = ("encoder", "_frames", "_size", "_max", "_lot", "closed", "dropped", "expired", "revoked", "on_close", "to_end")

    def __init__(self, encoder: EventEncoder, max_frames: int, *, to_end: bool = False) -> None:
        self.encoder = encoder
        # SubscribeToTask: open until the task is terminal, through INPUT_REQUIRED and the
        # answer (A2A spec §3, SubscribeToTask); SendStreamingMessage ends where it interrupts.
        self.to_end = to_end
        self._frames: list[bytes] = []
        self._max = max_frames
        self._lot = trio.lowlevel.ParkingLot()
        self.closed = False  # nothing more will be queued
        self.dropped = False  # closed because the client fell too far behind
        self.expired = False  # closed because its caller's credential expired (`run`'s `until`)
        self.revoked = False  # closed because a reload's access rules refuse its caller the task
        self.on_close: Callable[[SseStream], None] | None = None

    def put(self, frame: bytes) -> None:
        if self.closed:
            return
        if len(self._frames) >= self._max:
            self.dropped = True
            self.close()
            return
        self._frames.append(frame)
        if self._lot:
            self._lot.unpark()

    def revoke(self, refusal: BaseException | None = None) -> None:
        """A reload's rules refuse the caller the task (bridge/session/grants.py): what
        is queued is written, then the stream ends saying so."""
        if not self.closed:
            self.revoked = True
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._lot.unpark_all()
            if self.on_close is not None:
                self.on_close(self)

    async def run(self, send: Any, receive: Any, *, heartbeat_s: float, until: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write the response until the stream is closed and drained, or the client
        leaves; or until `until` returns: then it is closed (`expired`) and drained."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, receive, nursery.cancel_scope)
                if until is not None:
                    nursery.start_soon(self._close_after, until)
                await self._write(send, heartbeat_s)
                nursery.cancel_scope.cancel()
        finally:
            self.close()

    async def _write(self, send: Any, heartbeat_s: float) -> None:
        while True:
            if self._frames:
                batch, self._frames = self._frames, []
                await send({"type": "http.response.body", "body": b"".join(batch), "more_body": True})
                continue
            if self.closed:
                break
            with trio.move_on_after(heartbeat_s) as idle:
                await self._lot.park()
            if idle.cancelled_caught and not self._frames and not self.closed:
                await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
        tail = _DROPPED if self.dropped else _EXPIRED if self.expired else _REVOKED if self.revoked else b""
        # Shielded: the client's disconnect (`_watch`) may land inside hypercorn's
        # end-of-response work, which would leave the connection neither open nor
        # closed and hold the listener at shutdown (mcp_http._shielded says more).
        with trio.CancelScope(shield=True):
            await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _close_after(self, until: Callable[[], Awaitable[None]]) -> None:
        await until()
        if not self.closed:
            self.expired = True
            self.close()  # `_write` drains what is queued and ends the response

    async def _watch(self, receive: Any, scope: trio.CancelScope) -> None:
        # The body was read before the stream began: what comes now is the disconnect.
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()  # stop writing; the task itself goes on


class LiveTask:
    """A task whose turn runs now: projects the session's events and fans them out.

    The end of the turn reaches clients (streams, blocking calls, webhooks) only once
    the session has stored it (`Turn.wait()` returns then): a client that heard a task
    finished can always read it back, across a crash (bridge/session/journal.py).
    """

    protocol: ClassVar[str] = "a2a"  # the events-relayed metric's label (bridge/session/interfaces.py)

    def __init__(self, session: Any, kept: Kept, turn: Any, *,
                 on_state: Callable[[LiveTask, s.StreamResponse], None], on_end: Callable[[LiveTask], None]) -> None:  # fmt: skip
        self.session = session
        self.kept = kept  # the task's row and data (bridge/fronts/a2a/state.py)
        self.projector: TaskProjector = kept.projector
        # None: a turn another instance runs, not mirrored here yet (its session's `turn`
        # is, by the time its `TurnEnded` is delivered).
        self.turn = turn
        self.turn_id: str = turn.turn_id if turn is not None else kept.record.turn_id
        self.streams: list[SseStream] = []
        self.ended = False  # its turn ended (the task may still be interrupted, not terminal)
        self.settled = False  # ... and the session stored that: clients may hear it now
        self._late: list[tuple[SseStream, int | None]] = []  # attached between the two
        self._changed = trio.Event()
        self._on_state = on_state
        self._on_end = on_end
        self._unsubscribe: Callable[[], None] | None = None
        # Where a SubscribeToTask stream waits when the turn ends interrupted (TaskService).
        self.handoff: Callable[[SseStream], None] = SseStream.close
        # The last event taken: a session another instance runs delivers from the store,
        # from where it stood when subscribed, maybe from before the turn (`start`,
        # `resume`): what the projector has seen already is skipped.
        self._seen = 0

    @property
    def task_id(self) -> str:
        return self.projector.task_id

    def start(self, *, turn_started: Event) -> None:
        """Subscribe to the session and take the turn's first event (already emitted)."""
        self._unsubscribe = self.session.subscribe(self)
        turn_started.seq = self.turn.first_seq
        self.deliver(turn_started)

    def resume(self, held: list[Event], through_seq: int) -> None:
        """Subscribe to a session whose turn is under way (another instance runs it): the
        projector has its events through `through_seq`; `held`, what arrived while they
        were read (bridge/fronts/a2a/remote.py), and every later event follow."""
        self._seen = through_seq
        self._unsubscribe = self.session.subscribe(self)
        for event in held:
            self.deliver(event)

    # -- Subscriber -----------------------------------------------------------------------
    def deliver(self, event: Event) -> None:
        if self.ended:
            return
        if event.seq <= self._seen:
            return
        self._seen = event.seq
        before = self.projector.state
        out = self.projector.feed(event, time.time())
        if isinstance(event, TurnEnded) and event.turn_id == self.turn_id:
            self.ended = True
            if self._unsubscribe is not None:
                self._unsubscribe()
            self._on_end(self)  # now: the task's state joins the record the session writes next
            turn = self.turn or self.session.turn
            if turn is not None and turn.turn_id == self.turn_id:
                turn.when_done(lambda: self._settle(out))
            else:
                self._settle(out)  # followed from the store: stored already
            return
        if out:
            self._fan_out(out)
        if self.projector.state != before:
            self._state_changed(out)

    def _settle(self, out: list[s.StreamResponse]) -> None:
        """The turn's end is stored: clients may hear it now."""
        self.settled = True
        self._fan_out(out)
        for stream, history_length in self._late:
            self.attach(stream, history_length=history_length)
        self._late.clear()
        self._state_changed(out)

    def _state_changed(self, out: list[s.StreamResponse]) -> None:
        state = self.projector.state
        for ev in out:
            if ev.status_update is not None and ev.status_update.status.state == state:
                self._on_state(self, ev)
                break
        self._changed.set()
        self._changed = trio.Event()

    def congested(self) -> bool:
        return False  # never pause the back for an SSE client: a slow one is dropped

    async def wait_uncongested(self) -> None:
        pass

    # -- streams --------------------------------------------------------------------------
    def _fan_out(self, events: list[s.StreamResponse]) -> None:
        streams = self.streams
        if streams:
            payloads: dict[Any, list[bytes]] = {}
            for stream in streams:
                enc = stream.encoder
                key = enc.key
                got = payloads.get(key)
                if got is None:
                    got = payloads[key] = [enc.payload(ev) for ev in events]
                for p in got:
                    stream.put(enc.frame(p))
        if self.projector.stopped:
            terminal = self.projector.state in s.TERMINAL_STATES
            for stream in list(self.streams):
                if terminal or not stream.to_end:
                    stream.close()
                elif self.ended:  # interrupted, its turn over: the next turn of the task carries it on
                    self._detach(stream)
                    stream.on_close = None
                    self.handoff(stream)

    def attach(self, stream: SseStream, *, history_length: int | None = None) -> None:
        """The task as it is now, then every later event until it stops (terminal or interrupted)."""
        if stream.closed:  # its client left, or it was revoked, while it waited to be attached
            return
        if self.ended and not self.settled:
            self._late.append((stream, history_length))  # its end is being stored: wait for it
            return
        snapshot = self.projector.snapshot(history_length=history_length)
        stream.put(stream.encoder.frame(stream.encoder.payload(s.StreamResponse(task=snapshot))))
        if self.projector.stopped:
            if not stream.to_end or self.projector.state in s.TERMINAL_STATES:
                stream.close()
                return
            if self.ended:
                self.handoff(stream)  # interrupted, its turn over: the next turn carries it on
                return
        self.follow(stream)

    def follow(self, stream: SseStream) -> None:
        """Every later event on `stream` (it has the task as it was already)."""
        if stream.closed:
            return
        self.streams.append(stream)
        stream.on_close = self._detach

    def _detach(self, stream: SseStream) -> None:
        if stream in self.streams:
            self.streams.remove(stream)

    async def wait_stopped(self) -> None:
        """Until the task is terminal or interrupted, and clients may hear it (a blocking
        SendMessage returns then)."""
        while not (self.settled or (self.projector.stopped and not self.ended)):
            await self._changed.wait()

    async def wait_answered(self, question_id: str) -> None:
        """Until the task's question `question_id` is no longer open (at once on a session
        this instance runs: the answer is emitted as it is given; on another instance's,
        once its `QuestionAnswered` is followed here)."""
        while not self.ended and (q := self.projector.open_question) is not None and q.id == question_id:
            await self._changed.wait()

    async def wait_ended(self) -> None:
        while not self.settled:
            await self._changed.wait()
