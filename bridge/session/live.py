"""A live session: where fronts and backs meet.

A `Session` owns its back session and its turns, so a turn keeps running when the
client that started it goes away (A2A and chat clients may reconnect; an ACP editor
that exits ends its process anyway). Fronts never talk to backs, only to sessions:

- `start_turn(content)` begins a turn (one at a time, else `Busy`; `busy` says whether
  one runs), `Turn.wait()` gives its `TurnEnded`; `cancel()`, `answer(...)`,
  `set_option(...)`, `close()`.
- `subscribe(sub)` delivers every event, stamped with the session's gapless sequence
  number, synchronously and in order; a subscriber that is congested pauses the back
  at its next `flow()` (backpressure), or drops itself (its own policy).
- Events go to the journal (bridge/session/journal.py, the base class) and reach the
  store in batches; a turn's end is flushed before `Turn.wait()` returns.
- `front_state(kind)`: the typed state a front keeps with the session
  (bridge/session/state.py), stored with its record.

Fault isolation (STYLE.md rule 17): every delivery to a subscriber runs inside a
boundary; a subscriber that raises is unsubscribed (its `broken()` called, if it has
one) and logged as our bug, and the others and the turn go on. Every back call is
one too: whatever a back raises fails that turn (`TurnEnded` failed), cancels and
closes that fail are logged, and nothing a session does can end the manager. A turn
whose back sends nothing for the route's `turn_idle_timeout_s` fails (the manager's
watchdog, bridge/session/manager.py).

Slash commands (bridge/prompts): a session's commands are its back's own plus its
route's prompts (`commands()`); it emits `CommandsAvailable` again whenever they
change. A prompt starting with `/name` is resolved in `start_turn` (an unknown command
or a missing argument raises InvalidParams: no turn starts) and expanded inside the
turn before the back sees it (a source that fails it fails the turn, `PromptError`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import trio

from bridge import telemetry
from bridge.backs.base import Back, BackSession, ClientServices, SessionContext
from bridge.config import Route
from bridge.core.content import ContentBlock, title_of
from bridge.core.events import (
    CommandInfo,
    CommandsAvailable,
    ConfigOption,
    Event,
    OptionsChanged,
    TurnStarted,
)
from bridge.core.turn import TurnState
from bridge.errors import BackError, BackUnavailable, Busy, NotFound
from bridge.prompts.registry import PromptRegistry
from bridge.session.changes import Changes
from bridge.session.commands import Commands
from bridge.session.interfaces import Subscriber, TurnObserver, protocol_of, tell_broken, wait_subscribers
from bridge.session.journal import FLUSH_AT_EVENTS, MAX_PENDING_EVENTS, Flusher, Journal
from bridge.session.running import TurnRunner
from bridge.session.supervised import SupervisedNursery
from bridge.session.turn import Turn, new_id
from bridge.store import SessionRecord, Store, TurnRecord

__all__ = ["Session", "SessionOwner"]

log = logging.getLogger("bridge.session")

class SessionOwner(Protocol):
    """What a session needs of its manager (bridge/session/manager.py `SessionManager`)."""

    store: Store
    prompts: PromptRegistry
    observer: TurnObserver | None
    flusher: Flusher
    changes: Changes
    accepting: bool
    refusal: str
    aborted: bool
    lending: bool

    def lend_nursery(self) -> SupervisedNursery: ...

    def forget(self, session: Session) -> None: ...

    async def release_lease(self, session_id: str) -> None: ...

    def watch_idle(self, turn: Turn, idle_s: float) -> None: ...

    def unwatch_idle(self, turn: Turn) -> None: ...

    async def read_events(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]: ...

    def event_pages(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> AsyncIterator[list[Event]]: ...


def _nothing() -> None:
    pass


class Session(Commands, TurnRunner, Journal):
    """One live conversation: its back session, its running turn, its subscribers."""

    def __init__(self, manager: SessionOwner, record: SessionRecord, route: Route, back: Back) -> None:
        self.manager = manager
        self.record = record
        self.route = route
        self.back = back
        self.id = record.session_id
        self._seq = record.last_seq
        self._subscribers: list[Subscriber] = []
        self._protocols: list[str] = []  # each subscriber's front, for the metric
        self._back_session: BackSession | None = None
        self._back_lock: trio.Lock | None = None  # made with the back session (`_ensure_back`)
        self.turn: Turn | None = None
        # The session's task and its nursery (turns, the back session) start with the
        # first thing that needs them (`_spawn`): a session only read or watched costs
        # no task. `_queued`: what `run` starts once its nursery is open (None: not woken).
        self._nursery: trio.Nursery | None = None
        self._queued: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
        self._closed = trio.Event()
        self._gone = trio.Event()  # run() has ended: its back closed, its events stored
        self._unlisten = manager.prompts.listen(record.route, self._prompts_changed)
        # Set by the ACP front while an editor is attached (its files and terminals).
        self.client_services: ClientServices | None = None
        self.back_options: list[ConfigOption] = []  # what the back's agent offers
        # Its route was removed by a reload: the running turn may finish, no new one starts.
        self.retired = False
        self._announced: list[CommandInfo] | None = None  # the commands last emitted
        self.last_used = trio.current_time()  # a turn started or ended, a client came or went
        # Followers on other instances watching live (bridge/cluster: WatchCmd): while
        # any do, each event is flushed at once, so they see it within a store round trip.
        self.remote_watchers = 0
        self._open_journal()

    # -- lifecycle ------------------------------------------------------------------
    def _spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start `fn(*args)` in the session's nursery, waking the session first (its task
        started in the manager's nursery) if nothing ran in it yet."""
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)
            return
        self._wake()
        if self._queued is not None:  # else the manager is gone: nothing starts any more
            self._queued.append((fn, args))

    def _wake(self) -> None:
        if self._queued is None and not self._gone.is_set() and self.manager.lending:
            self._queued = []
            self.manager.lend_nursery().start_soon(self.run)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The session's task, from its first turn (`_spawn`) or its close until it is gone."""
        if self._queued is None:
            self._queued = []
        try:
            try:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    queued, self._queued = self._queued, []
                    for fn, args in queued:
                        nursery.start_soon(fn, *args)
                    task_status.started()
                    await self._closed.wait()
                    if nursery.child_tasks:
                        nursery.cancel_scope.cancel()
            except Exception:
                # The session's boundary (STYLE.md rule 17): a task of its back or of a
                # turn raised (our bug). This session ends; the manager and the others go on.
                log.exception("session %s failed; closed", self.id, extra={"route": self.record.route})
            finally:
                self._nursery = None  # closed: what is spawned from now on never starts
                self._closed.set()
                self._unlisten()
        finally:
            with trio.move_on_after(5, shield=True):
                await self._end_cut_turn()
                await self._close_back()
                await self.flush_or_close()
                await self.manager.release_lease(self.id)  # stored first: the next owner reads it all
            self.manager.forget(self)
            # What points back at us (the prompts' listener, the back session's host,
            # the last turn's session) let go: no reference cycle keeps a closed
            # session's memory until a full collection (bench/ws_stream.py, reuse).
            self._unlisten, self._back_session, self.turn = _nothing, None, None
            self._gone.set()

    async def flush_or_close(self) -> None:
        await Journal.flush_or_close(self)
        if self._closed.is_set():
            self._wake()  # closed by the store's failure: its task ends it, as any close

    async def _close_back(self) -> None:
        back = self._back_session
        if back is None:
            return
        try:
            await back.aclose()
        except BackError as exc:
            log.warning("session %s: back did not close cleanly: %s", self.id, exc.message)
        except Exception:  # a back is our code: our bug, and only this session's
            log.exception("session %s: back raised while closing", self.id)

    async def close(self) -> None:
        """Cancel any running turn (bounded), then free the back and the session."""
        if self.busy:
            self.cancel()
            with trio.move_on_after(self.route.cancel_grace_s + 1):
                await self.turn.wait()
        self._closed.set()
        if self._queued is None and not self._gone.is_set() and not self.manager.lending:
            await self.run()  # never ran, and its manager is gone: it ends here, not in a task
        else:
            self._wake()  # a session that never ran anything closes in its task too

    @property
    def closed(self) -> bool:
        """Closing or closed: no turn starts here any more."""
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Until the session closes (a front lets go of what it holds for it)."""
        await self._closed.wait()

    def idle_for(self, now: float) -> float | None:
        """How long nobody has used it; None while a turn runs or a client is attached."""
        if self.busy or self._subscribers or self.client_services is not None or self._closed.is_set():
            return None
        return now - self.last_used

    @property
    def busy(self) -> bool:
        """A turn is running (or waiting for an answer, or cancelling): a new one is `Busy`."""
        turn = self.turn
        return turn is not None and turn.machine.active

    @property
    def awaiting_answer(self) -> bool:
        """The running turn waits for an answer to a question it asked."""
        turn = self.turn
        return turn is not None and turn.machine.state is TurnState.AWAITING_ANSWER

    # -- SessionHost (what a back may use outside a turn) ----------------------------
    def emit(self, event: Event) -> None:
        if type(event) is CommandsAvailable:
            event.commands = self._with_prompts(event.commands)
        self._emit(event)

    # -- slash commands -------------------------------------------------------------
    def commands(self) -> list[CommandInfo]:
        """The back's own commands, then the route's prompts (a prompt hides a back command of its name)."""
        return self._with_prompts(self.back.info.commands)

    def _with_prompts(self, back_commands: list[CommandInfo]) -> list[CommandInfo]:
        commands = self.manager.prompts.merged(self.record.route, back_commands)
        self._announced = commands
        return commands

    def _prompts_changed(self) -> None:
        if self._closed.is_set():
            return
        commands = self.manager.prompts.merged(self.record.route, self.back.info.commands)
        if commands != self._announced:
            self._announced = commands
            self._emit(CommandsAvailable(commands=commands))

    def set_back_options(self, options: list[ConfigOption]) -> None:
        self.back_options = options
        self._emit(OptionsChanged(options=self.config_options()))

    @property
    def shared_nursery(self) -> SupervisedNursery:
        return self.manager.lend_nursery()

    # -- events ---------------------------------------------------------------------
    def _emit(self, event: Event) -> None:
        self._seq += 1
        event.seq = self._seq
        if not self._pending:
            self.manager.flusher.dirty(self)
            if self.remote_watchers:
                self.manager.flusher.soon()
        self._pending.append(event)
        for sub in self._subscribers:
            # One subscriber's boundary (STYLE.md rule 17): free when nothing raises.
            try:
                sub.deliver(event)
            except Exception:
                self._subscriber_failed(sub, event.seq)

    def _subscriber_failed(self, sub: Subscriber, seq: int | None) -> None:
        """`sub` raised: our bug in a front. Unsubscribe it and tell it; nobody else notices."""
        at = f" at event {seq}" if seq is not None else ""
        log.exception("session %s: a %s subscriber failed%s; unsubscribed", self.id, protocol_of(sub), at)
        if sub in self._subscribers:
            i = self._subscribers.index(sub)  # copy on write, as in `subscribe`
            self._subscribers = self._subscribers[:i] + self._subscribers[i + 1 :]
            self._protocols = self._protocols[:i] + self._protocols[i + 1 :]
        tell_broken(sub, self.id)

    async def _flow(self) -> None:
        await wait_subscribers(self._subscribers, self._subscriber_failed)
        pending = len(self._pending)
        if pending >= MAX_PENDING_EVENTS:
            await self.flush()
            return
        if pending >= FLUSH_AT_EVENTS:
            self.manager.flusher.soon()  # written in the background while the back goes on
        await trio.lowlevel.checkpoint()

    def subscribe(self, sub: Subscriber) -> Callable[[], None]:
        # Copy on write: `_emit` iterates the list it found, so a subscriber that
        # (un)subscribes during a delivery never makes another one miss that event,
        # and the hot path pays nothing for it.
        self._subscribers = [*self._subscribers, sub]
        self._protocols = [*self._protocols, protocol_of(sub)]
        self.last_used = trio.current_time()

        def unsubscribe() -> None:
            self.last_used = trio.current_time()
            if sub in self._subscribers:
                i = self._subscribers.index(sub)
                self._subscribers = self._subscribers[:i] + self._subscribers[i + 1 :]
                self._protocols = self._protocols[:i] + self._protocols[i + 1 :]

        return unsubscribe

    @property
    def last_seq(self) -> int:
        return self._seq

    def _changed(self) -> None:
        """Its status changed (a turn started or ended, a question asked or answered)."""
        self.manager.changes.changed(self.id)

    async def history(self, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]:
        """Every event in (after_seq, through_seq]: what is pending is stored first."""
        await self.flush()
        return await self.manager.read_events(self.id, after_seq, through_seq=through_seq)

    async def history_pages(self, after_seq: int = 0, *, through_seq: int | None = None) -> AsyncIterator[list[Event]]:
        """`history`, in bounded pages (bridge/session/manager.py `event_pages`)."""
        await self.flush()
        async for page in self.manager.event_pages(self.id, after_seq, through_seq=through_seq):
            yield page

    # -- turns ----------------------------------------------------------------------
    def start_turn(
        self, content: list[ContentBlock], *, message_id: str | None = None, meta: dict[str, Any] | None = None,
        turn_id: str | None = None, record_meta: dict[str, Any] | None = None,
    ) -> Turn:  # fmt: skip
        """Begin a turn now (synchronously, so a cancel that follows finds it).

        `message_id` and `meta` are the client's own (A2A `Message.messageId`,
        `metadata`, `extensions`), kept with the prompt so a back can pass them on."""
        if self.busy:
            raise Busy(f"session {self.id} is already running a turn; cancel it or wait for it to end")
        if self._closed.is_set():
            raise NotFound(f"session {self.id} is closed")
        if self.retired:
            raise NotFound(f"route {self.record.route!r} of session {self.id} was removed from the configuration")
        if not self.manager.accepting:
            raise BackUnavailable(self.manager.refusal)
        back_commands = [c.name for c in self.back.info.commands]
        invocation = self.manager.prompts.resolve(self.record.route, content, back_commands)  # InvalidParams: no turn
        turn = Turn(self, turn_id or new_id(), content, message_id=message_id, message_meta=meta)
        turn.invocation = invocation
        turn.trace = telemetry.start_turn(route=self.record.route, session=self.id, turn=turn.turn_id, back=self.route.back)
        self.turn = turn
        self.last_used = trio.current_time()
        if self.record.title is None:
            self.record.title = title_of(content)
        turn.first_seq = self._seq + 1  # its TurnStarted's
        # Stored with its TurnStarted event at the next flush, not on any client's path;
        # made before the event, so a subscriber may note its stream position on it.
        turn.record = self._unsaved_turns[turn.turn_id] = TurnRecord(
            turn_id=turn.turn_id, session_id=self.id, started_at=turn.started_at, first_seq=turn.first_seq,
            meta=dict(record_meta or {}),
        )  # fmt: skip
        self.record.turn_count += 1
        self.record.last_stop, self.record.last_cut = None, False
        self._emit(TurnStarted(turn_id=turn.turn_id, prompt=content, message_id=message_id, meta=meta))
        self._changed()
        self._spawn(self._run_turn, turn)
        return turn

    async def _ensure_back(self) -> BackSession:
        if self._back_lock is None:
            self._back_lock = trio.Lock()
        async with self._back_lock:
            if self._back_session is None:
                assert self._nursery is not None
                ctx = SessionContext(
                    session_id=self.id,
                    route=self.record.route,
                    cwd=self.record.cwd,
                    options=dict(self.record.options),
                    back_ref=self.record.back_ref,
                    meta=dict(self.record.meta),
                    host=self,
                )
                self._back_session = await self.back.open_session(ctx, nursery=self._nursery)
            return self._back_session
