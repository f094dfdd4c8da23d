"""Chat streams: one projector per watched session, its frames fanned out to every socket.

`ChatStreams.watch(session, watcher, after)` attaches a socket to a session. The
first watcher of a session creates its `_Stream`: a session subscriber that runs a
`ChatProjector` (caught up from the stored log: from the checkpoint of its last run,
bridge/fronts/chat/replay.py) and encodes each frame once for all watchers. As a run
starts, the stream notes the run's checkpoint on the turn's record (`stream_seq`); as a
headless run ends, its output check (bridge/fronts/chat/runs.py). A watcher that asks
for `after_sequence` is replayed by re-deriving the frames from the log, from the run
holding that position (the frames are a pure function of it and of that run's
checkpoint, codecs/chat.py), while the live frames it would have got are held; the
held frames past the replay are then released, so it sees every frame once, in order,
with no gap. An `after_sequence` the session has not reached is live from
where it is (`session:subscribed` says where); one whose frames are no longer stored is
refused (NotFound). A stream lives while someone watches; with no watcher a session
costs nothing here.

Subscribers never pause the session (`congested()` is False): each watcher bounds
its own queue and drops itself when a client is too slow (the WebSocket policy).

`transcript(session_id, ...)` derives one page of the transcript's turn projections for
REST, projecting only that page's runs (from the first one's checkpoint).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import Any, ClassVar, Protocol

import trio

from bridge.codecs.chat import ChatProjector, Frame, commands_frame
from bridge.fronts.chat.config import WsFrontConfig
from bridge.core.events import CommandsAvailable, Event, TurnEnded
from bridge.errors import NotFound
from bridge.fronts.chat.replay import feed_stored, origin, origin_of
from bridge.fronts.chat.runs import RunBook
from bridge.schema.chat import TurnProjection
from bridge.session import Session, SessionManager, Turn
from bridge.store import SessionRecord

__all__ = ["ChatStreams", "TextFrame", "Watcher", "turn_open"]

log = logging.getLogger("bridge.fronts.chat")

TextFrame = tuple[int, str]  # (sequence, the JSON frame)

_REPLAY_BATCH = 256


class Watcher(Protocol):
    def push(self, frames: list[TextFrame]) -> None:
        """Live frames, in order; must not block (a watcher over its bound drops itself)."""

    async def replay(self, frames: list[TextFrame]) -> None:
        """Frames of a replay; waits for room in the watcher's queue."""

    def session_gone(self, session_id: str, reason: str) -> None:
        """It no longer watches the session (deleted, or closed and reopened)."""

    def overflowed(self) -> None:
        """Too many frames held for it during a replay: the client is too slow."""


def _nothing() -> None:
    pass


class _Unwatched(Exception):
    """A replay's watcher stopped watching: the rest is not read."""


def turn_open(record: SessionRecord) -> bool:
    """The stored summary says a turn started and has not ended: it runs (on another
    instance of a cluster), or its process stopped and the turn is not closed yet."""
    return bool(record.turn_count) and record.last_stop is None and not record.last_cut


class _Stream:
    """A session subscriber that turns its events into chat frames for its watchers."""

    protocol: ClassVar[str] = "chat"  # the events-relayed metric's label (bridge/session/interfaces.py)

    __slots__ = (
        "session",
        "dead",
        "runs",
        "projector",
        "watchers",
        "holding",
        "joining",
        "failed",
        "hold_max",
        "_pending",
        "ready",
        "unsubscribe",
        "_waiting",
        "_armed",
        "_stored",
    )

    def __init__(self, streams: ChatStreams, session: Session) -> None:
        self.session = session
        self.dead = False
        self.runs = RunBook.of_session(session)
        self.projector = streams.projector(
            session.id, self.runs, live=True, skip_through=math.inf, on_checkpoint=self._checkpoint
        )
        self.watchers: dict[Watcher, None] = {}
        self.holding: dict[Watcher, list[TextFrame]] = {}
        self.joining = 0  # watchers on their way in (waiting for `ready`, replaying)
        self.failed = False
        self.hold_max = streams.cfg.queue_max_frames
        self._pending: list[Event] | None = []  # events that arrive while catching up
        self.ready = trio.Event()
        # Frames behind a turn's end that is not stored yet, in order: a client hears a
        # run ended only once a reconnect could replay it (bridge/session/journal.py).
        # Made on first use: an empty deque is ~0.7 KiB per watched session.
        self._waiting: deque[tuple[Turn | None, list[TextFrame]]] | None = None
        self._armed: Turn | None = None  # the turn whose `when_done` will pump `_waiting`
        self._stored: Turn | None = None  # ... and once it did: that turn's end is stored
        self.unsubscribe = session.subscribe(self)

    async def start(self, manager: SessionManager) -> None:
        """Catch up from the checkpoint of the session's last run: its sequence and the
        state of the run in progress are all a live stream needs."""
        start = await origin(manager.store, self.session.id, None)
        last = await feed_stored(manager, self.session.id, self.projector, start, live=self.session, runs=self.runs)
        self.projector.skip_through = 0
        pending, self._pending = self._pending or [], None
        for event in pending:
            if event.seq > last:
                self.deliver(event)
        self.ready.set()

    def _checkpoint(self, turn_id: str, sequence: int) -> None:
        # Written with the turn's next flush: where a replay of this run starts.
        turn = self.session.turn
        if turn is not None and turn.turn_id == turn_id and turn.record is not None:
            turn.record.stream_seq = sequence

    # -- Subscriber ---------------------------------------------------------------------
    def deliver(self, event: Event) -> None:
        if self.dead:
            return
        if self._pending is not None:
            self._pending.append(event)
            return
        if type(event) is CommandsAvailable:  # state, outside the run log: no sequence
            text = commands_frame(self.session.id, event.commands).decode()
            for watcher in list(self.watchers):
                self._push(watcher, [(0, text)])
            return
        try:
            frames = self.projector.feed(event)
        except Exception:  # our bug: it must not break the session's run, only this stream
            log.exception("session %s: the chat projection failed at event %d", self.session.id, event.seq)
            self.broken()
            return
        if not frames:
            return
        texts = [(seq, data.decode()) for seq, data in frames]
        turn = self.session.turn
        gate = turn if type(event) is TurnEnded and turn is not None and turn.turn_id == event.turn_id else None
        if gate is None and not self._waiting:
            self._send(texts)
            return
        if self._waiting is None:
            self._waiting = deque()
        self._waiting.append((gate, texts))
        self._pump()

    def _pump(self) -> None:
        while self._waiting:
            gate, texts = self._waiting[0]
            if gate is not None and gate is not self._stored:  # its end is being stored
                if self._armed is not gate:
                    self._armed = gate
                    gate.when_done(lambda: self._stored_end(gate))  # at once if it is stored
                    if self._stored is gate:
                        continue  # it was, and that call pumped: look again
                return
            self._waiting.popleft()
            self._send(texts)

    def _stored_end(self, turn: Any) -> None:
        self._stored = turn
        self._pump()

    def _send(self, texts: list[TextFrame]) -> None:
        if self.dead:
            return
        for watcher in list(self.watchers):
            self._push(watcher, texts)
        for watcher, held in list(self.holding.items()):
            held.extend(texts)
            if len(held) > self.hold_max:
                del self.holding[watcher]
                watcher.overflowed()

    def _push(self, watcher: Watcher, texts: list[TextFrame]) -> None:
        # One watcher's boundary (STYLE.md rule 17): a socket that fails is dropped, the
        # other watchers of the session and its run go on.
        try:
            watcher.push(texts)
        except Exception:
            log.exception("session %s: a chat watcher failed; dropped", self.session.id)
            self.watchers.pop(watcher, None)
            try:
                watcher.session_gone(self.session.id, "internal error in the chat stream: subscribe again")
            except Exception:
                log.exception("session %s: a failed chat watcher could not be told", self.session.id)

    def congested(self) -> bool:
        return False  # never pause the session for a chat client (see Watcher.push)

    async def wait_uncongested(self) -> None:
        pass

    def broken(self) -> None:
        for watcher in [*self.watchers, *self.holding]:
            watcher.session_gone(self.session.id, "internal error in the chat stream: subscribe again")
        self.watchers.clear()
        self.holding.clear()
        self.dead = True
        trio.lowlevel.current_trio_token().run_sync_soon(self.leave)  # after this delivery

    def leave(self) -> None:
        """Unsubscribe from the session, once: the unsubscriber holds this stream (a
        cycle that would keep the projector until a full collection)."""
        self.unsubscribe()
        self.unsubscribe = _nothing

    @property
    def idle(self) -> bool:
        return not self.watchers and not self.holding and not self.joining


class ChatStreams:
    def __init__(self, cfg: WsFrontConfig, manager: SessionManager) -> None:
        self.cfg = cfg
        self.manager = manager
        self._streams: dict[str, _Stream] = {}

    def projector(self, session_id: str, runs: RunBook, *, live: bool, **kw: Any) -> ChatProjector:
        return ChatProjector(
            session_id,
            run_options=runs.options,
            keep_check=runs.keep,
            clock=time.time if live else None,
            block_max_chars=self.cfg.block_max_chars,
            **kw,
        )

    def live_projector(self, session_id: str) -> ChatProjector | None:
        stream = self._streams.get(session_id)
        return stream.projector if stream is not None and stream.ready.is_set() else None

    async def _stream(self, session: Session) -> _Stream:
        """The session's stream, caught up; counted in `joining` until the caller is in."""
        while True:
            stream = self._streams.get(session.id)
            if stream is not None and stream.dead:
                self._drop(stream)
                stream = None
            if stream is not None and stream.session is session:
                stream.joining += 1
                try:
                    await stream.ready.wait()
                except BaseException:
                    stream.joining -= 1
                    raise
                if not stream.failed:
                    return stream
                stream.joining -= 1
                continue  # its creator went away while catching up: start another
            if stream is not None:  # a stream of a session object that has since closed
                self._drop(stream, reason=f"session {session.id} was closed and reopened: subscribe again")
            stream = self._streams[session.id] = _Stream(self, session)
            stream.joining += 1
            try:
                await stream.start(self.manager)
            except BaseException:
                stream.joining -= 1
                stream.failed = True
                stream.ready.set()
                self._drop(stream)
                raise
            return stream

    async def watch(self, session: Session, watcher: Watcher, after: int | None) -> int:
        """Attach `watcher`; replay the frames after `after` first (None: live only).

        Returns the sequence number from which the watcher is live.
        """
        stream = await self._stream(session)
        try:
            if after is None or after >= stream.projector.sequence:
                stream.watchers[watcher] = None
                return stream.projector.sequence
            stream.holding[watcher] = []
            last = await self._replay(session, watcher, after, stream)
            held = stream.holding.pop(watcher, None)
            if held is None:  # it was dropped meanwhile (too slow, gone, or the session deleted)
                return last
            later = [f for f in held if f[0] > last]
            if later:
                watcher.push(later)
            stream.watchers[watcher] = None
            return stream.projector.sequence
        finally:
            stream.joining -= 1
            stream.holding.pop(watcher, None)
            if stream.idle:
                self._drop(stream)

    async def _replay(self, session: Session, watcher: Watcher, after: int, stream: _Stream) -> int:
        start = await origin(self.manager.store, session.id, after)
        runs = RunBook.of_session(session)
        projector = self.projector(session.id, runs, live=False, skip_through=after)

        async def sink(frames: list[Frame]) -> None:
            for i in range(0, len(frames), _REPLAY_BATCH):
                if watcher not in stream.holding:  # unwatched meanwhile (revoked, gone, too slow)
                    raise _Unwatched
                await watcher.replay([(seq, data.decode()) for seq, data in frames[i : i + _REPLAY_BATCH]])

        try:
            await feed_stored(self.manager, session.id, projector, start, live=session, sink=sink, runs=runs)
        except _Unwatched:
            pass
        return projector.sequence

    def unwatch(self, session_id: str, watcher: Watcher) -> None:
        stream = self._streams.get(session_id)
        if stream is None:
            return
        stream.watchers.pop(watcher, None)
        stream.holding.pop(watcher, None)
        if stream.idle:
            self._drop(stream)

    def forget(self, session_id: str, record: SessionRecord | None = None) -> None:
        """The session (`record`) was deleted: tell its watchers, the change feeds and
        canonical event streams (bridge/session/changes.py), and drop its stream."""
        self.manager.changes.deleted(session_id, record)
        stream = self._streams.get(session_id)
        if stream is not None:
            self._drop(stream, reason=f"session {session_id} was deleted")

    def _drop(self, stream: _Stream, *, reason: str | None = None) -> None:
        if reason is not None:
            for watcher in [*stream.watchers, *stream.holding]:
                watcher.session_gone(stream.session.id, reason)
        stream.watchers.clear()
        stream.holding.clear()
        stream.dead = True
        # Not now: this may run inside the session's delivery loop (a slow client dropped
        # while it is fed), and leaving that loop's list mid-iteration would make the
        # next subscriber miss the event.
        trio.lowlevel.current_trio_token().run_sync_soon(stream.leave)
        if self._streams.get(stream.session.id) is stream:
            del self._streams[stream.session.id]

    async def transcript(
        self, session_id: str, *, limit: int, before: int | None = None
    ) -> tuple[list[TurnProjection], int, int | None]:
        """The turn projections of the newest `limit` runs that start before event
        `before` (None: the newest runs), derived from the stored log from the first
        run's checkpoint; the last frame number they reach; and where the page before
        them ends (the `before` of the next older page), None when this page is the first."""
        live: Any = self.manager.live(session_id)
        if live is None:
            record = await self.manager.store.get_session(session_id)
            if record is None:
                raise NotFound(f"unknown session {session_id!r}")
            if turn_open(record) and not self.manager.cluster.solo:
                live = await self.manager.get(session_id)  # another instance runs it: asked to store its events
        if live is not None:
            runs = RunBook.of_session(live)
            await live.flush()  # the running turn's record is listed, its events readable
        else:
            runs = RunBook.of_record(record)
        store = self.manager.store
        turns = await store.list_turns(session_id, before_seq=before, limit=limit + 1, newest_first=True)
        more = len(turns) > limit
        turns = turns[:limit][::-1]
        if not turns:
            return [], 0, None  # nothing before `before`: the first run's checkpoint is 0
        first = turns[0]
        projector = self.projector(session_id, runs, live=False, keep_transcript=True, skip_through=math.inf)
        reached = False

        def opened(turn_id: str, sequence: int) -> None:
            nonlocal reached
            if not reached:  # the runs before the page's first one are not kept
                projector.transcript().clear()
                reached = turn_id == first.turn_id

        projector.on_checkpoint = opened
        after = await store.list_turns(session_id, after_seq=turns[-1].first_seq, limit=1)
        through = after[0].first_seq - 1 if after else None
        start = await origin_of(store, session_id, first)
        await feed_stored(self.manager, session_id, projector, start, live=live, through_seq=through, runs=runs)
        if after:  # the next run's start would close a run whose end was never stored
            projector.end_unended_run()
        return projector.transcript(), projector.sequence, first.first_seq if more else None
