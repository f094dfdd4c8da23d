"""The session manager: creates, finds, runs and closes live sessions.

A `SessionManager` owns a nursery in which every live `Session` (bridge/session/live.py)
runs, the journal's one flusher (bridge/session/journal.py), the prompt sources
(bridge/prompts) and two watchdogs:

- the live sessions are a cache of the store (`_close_idle`): a session nobody uses
  (no turn running, no client attached or watching, no front keeping it with a
  `keep_alive` predicate, as an A2A task waiting for input) is closed, its back too,
  after `[daemon] idle_session_close_s`, or sooner, least recently used first, when
  more than `[daemon] max_idle_sessions` are idle; `get` brings it back from the
  store. Live sessions are capped (`[daemon] max_live_sessions`, a route's
  `max_live_sessions`): when full, the longest-idle one is closed to make room; with
  none idle, `Overloaded`.
- a running turn whose back sends nothing for its route's `turn_idle_timeout_s` fails
  (`_watch_idle_turns`: one task for every turn, one increment per event).

For the daemon (reload, shutdown, metrics): `stop_accepting()` refuses new sessions
and turns from then on (`accepting` off, the `stopping` event set); `drain(grace_s)`
lets running turns finish, then cancels the rest, so every front reports the
cancellation its own way from `TurnEnded(cancelled)` (the daemon sets `drained` after);
`reconfigure(config)` swaps routes (removed routes' sessions are `retired`: no new
turns); an optional `observer` (bridge/metrics.py) hears of sessions, turns and back
errors once each, and of delivered events once per store flush, never per event.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import trio

from bridge.cluster.base import Cluster, SoloCluster
from bridge.backs.base import Back
from bridge.config import Config, Route
from bridge.core.events import Event, decode_events
from bridge.errors import BackUnavailable, BridgeError, NotFound, Overloaded
from bridge.prompts.registry import PromptRegistry
from bridge.session.changes import Changes
from bridge.session.grants import Grants
from bridge.session.interfaces import TurnObserver
from bridge.session.journal import Flusher
from bridge.session.limits import TurnLimits
from bridge.session.live import Session
from bridge.session.lifecycle import Lifecycle
from bridge.session.owners import Owners
from bridge.session.supervised import SupervisedNursery
from bridge.session.turn import Turn, new_id
from bridge.store import SessionRecord, Store

__all__ = ["EVENT_PAGE_BATCHES", "SessionManager"]

# Stored batches read at a time by `event_pages` (a batch is one flush: usually a few
# events, at most `FLUSH_AT_EVENTS`-odd under a fast back).
EVENT_PAGE_BATCHES = 32

log = logging.getLogger("bridge.session")

# The live sessions are looked at for idle ones every `_IDLE_CHECK_S` (or a quarter of
# `idle_session_close_s`), and a second after a new session takes their number past
# `max_idle_sessions`, at most once a second: a pass costs ~0.5 ms per thousand.
_IDLE_CHECK_S = 10.0
_IDLE_CHECK_MIN_S = 1.0


class SessionManager(Owners, Lifecycle):
    """Creates, finds and runs sessions; owns their nursery."""

    def __init__(
        self, config: Config, store: Store, make_back: Callable[[str, Route], Back], *, cluster: Cluster | None = None
    ) -> None:
        self.config = config
        self.store = store
        # The instances sharing the store (bridge/cluster/): who runs which session live.
        self.cluster: Cluster = cluster or SoloCluster()
        self._open_owners()
        self._make_back = make_back
        self._backs: dict[str, Back] = {}
        self._live: dict[str, Session] = {}
        self._nursery: trio.Nursery | None = None
        # Running turns under a route's `turn_idle_timeout_s`: one watchdog for them all
        # (`_watch_idle_turns`), so a turn costs no task and an event one increment.
        self._idle_turns: set[Turn] = set()
        self._idle_wakeup = trio.Event()
        self._idle_step = math.inf  # how long the watchdog sleeps now
        self._check_idle = trio.Event()  # wakes `_close_idle` before its next look
        self.flusher = Flusher(config.store.flush_interval_s)  # stores every session's events
        self.observer: TurnObserver | None = None
        self.changes = Changes()  # which sessions changed, for live lists (bridge/session/changes.py)
        self.grants = Grants()  # streams a reload's access rules may end (bridge/session/grants.py)
        self.accepting = True  # False: new sessions and turns are refused with `refusal`
        self.refusal = "the bridge is shutting down"
        self.stopping = trio.Event()  # the daemon stops: set with `accepting` off, for good
        self.drained = trio.Event()  # ... and the stop's drain has ended every running turn
        # Predicates by which a front keeps an idle session live (an A2A task waiting for input).
        self.keep_alive: list[Callable[[Session], bool]] = []
        # What fronts finish after the drain, before the sessions close (A2A webhooks);
        # the daemon runs them concurrently, bounded by `[server] graceful_timeout_s`.
        self.before_close: list[Callable[[], Awaitable[None]]] = []
        self.aborted = False
        self.prompts = PromptRegistry(config)  # slash commands; its MCP sources run in our nursery
        # `[limits]`: turns at once and per minute, per route and per caller (bridge/session/limits.py).
        self.limits = TurnLimits(lambda: self.config, trio.current_time)
        self.limits.on_refused = self._refused
        # Sessions `get` is reading from the store (how many readers), and those retention
        # is deleting (`hold_from_prune`): one is never loaded while the other runs.
        self._opening: dict[str, int] = {}
        self._pruning: set[str] = set()
        self._pruned = trio.Event()

    def _refused(self, route: str, reason: str, front: str) -> None:
        if self.observer is not None:
            self.observer.turn_refused(route, reason, front)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Turns a killed process left running end now, before any session can load
        # them: every front then replays their end (bridge/store/base.py).
        for cut in await self.store.close_cut_turns():
            log.warning("turn cut short by a stopped process: closed as interrupted",
                        extra={"session": cut.session_id, "turn": cut.turn_id})  # fmt: skip
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.cluster.run, self.serve_command)
                await nursery.start(self.prompts.run)
                nursery.start_soon(self.flusher.run)
                nursery.start_soon(self._close_idle)
                nursery.start_soon(self._watch_idle_turns)
                task_status.started()
                await trio.sleep_forever()
        finally:
            # Closed to new arrivals: a session closed from now on (`close_all` as its
            # runtime unwinds) ends in its caller, not in a task (`Session.close`).
            self._nursery = None

    @property
    def lending(self) -> bool:
        """Whether `lend_nursery` can start tasks: `run` is running."""
        return self._nursery is not None

    async def _close_idle(self) -> None:
        """Close the live sessions nobody has used for `[daemon] idle_session_close_s`,
        and the least recently used idle ones past `[daemon] max_idle_sessions`, so a
        long-running daemon's memory and agent processes stay bounded; `get()` brings
        one back from the store when a client asks for it."""
        while True:
            limit = self.config.daemon.idle_session_close_s
            with trio.move_on_after(max(_IDLE_CHECK_MIN_S, min(limit / 4, _IDLE_CHECK_S)) if limit else _IDLE_CHECK_S):
                await self._check_idle.wait()
                await trio.sleep(_IDLE_CHECK_MIN_S)  # a flood of new sessions: one look per second
            self._check_idle = trio.Event()
            await self._close_idle_now(limit)

    async def _close_idle_now(self, limit: float) -> None:
        # A method of its own: the sessions it closes are not held by the loop's frame.
        sessions = [*self._live.values(), *self._followed()]
        idle = sorted(self._idle(sessions, trio.current_time()), key=lambda pair: pair[0], reverse=True)
        over = len(idle) - self.config.daemon.max_idle_sessions
        for i, (idle_s, session) in enumerate(idle):  # the longest idle first
            expired = bool(limit) and idle_s >= limit
            if i >= over and not expired:
                break
            extra = {"route": session.record.route, "session": session.id}
            if expired:
                log.info("session idle for %.0f s: closed", idle_s, extra=extra)
            else:
                log.debug("more than max_idle_sessions idle: the least recently used closed", extra=extra)
            await session.close()
            if self._remote.get(session.id) is session:
                del self._remote[session.id]
        if over > 0:
            log.info("%d idle sessions closed: more than [daemon] max_idle_sessions (%d) were idle",
                     over, self.config.daemon.max_idle_sessions)  # fmt: skip

    def _idle(self, sessions: Iterable[Session], now: float) -> list[tuple[float, Session]]:
        """(idle for, session) of those nobody uses and no front keeps (`keep_alive`)."""
        return [(d, s) for s in sessions if (d := s.idle_for(now)) is not None and not any(k(s) for k in self.keep_alive)]

    def watch_idle(self, turn: Turn, idle_s: float) -> None:
        turn.idle_s, turn.idle_seen, turn.quiet_since = idle_s, turn.events, trio.current_time()
        self._idle_turns.add(turn)
        if idle_s / 4 < self._idle_step:
            self._idle_wakeup.set()  # the watchdog sleeps too long for this turn's bound

    def unwatch_idle(self, turn: Turn) -> None:
        self._idle_turns.discard(turn)

    async def _watch_idle_turns(self) -> None:
        """Cut off a turn once its back has sent nothing for its route's
        `turn_idle_timeout_s` (a question waiting for its user does not count).

        Each turn is looked at every quarter of its bound at least, so it fails between
        1 and 1.25 times the bound after the back's last event; an event costs one
        increment (`Turn.events`) instead of a deadline move (STYLE.md rule 15's idle
        scope, made cheap for the per-event path)."""
        while True:
            self._idle_step = min((t.idle_s for t in self._idle_turns), default=math.inf) / 4
            with trio.move_on_after(self._idle_step):
                await self._idle_wakeup.wait()
            if self._idle_wakeup.is_set():
                self._idle_wakeup = trio.Event()
            self._cut_idle_turns(trio.current_time())

    def _cut_idle_turns(self, now: float) -> None:
        # A method of its own: the last turn looked at is not held by the loop's frame.
        for turn in list(self._idle_turns):
            if turn.events != turn.idle_seen or turn.asking:
                turn.idle_seen, turn.quiet_since = turn.events, now
            elif now - turn.quiet_since >= turn.idle_s - 1e-9 and not turn.idled:
                s = turn.session
                log.warning("session %s turn %s: the back sent nothing for %g s; failed", s.id, turn.turn_id, turn.idle_s)
                turn.idled = True
                self._idle_turns.discard(turn)
                assert turn.scope is not None
                turn.scope.cancel()

    def lend_nursery(self) -> SupervisedNursery:
        """The manager's nursery as lent to backs and fronts (`Session.shared_nursery`)."""
        assert self._nursery is not None, "SessionManager.run() is not running"
        return SupervisedNursery(self._nursery)

    def back_for(self, route_name: str) -> Back:
        back = self._backs.get(route_name)
        if back is None:
            if route_name not in self.config.routes:
                raise NotFound(f"no route named {route_name!r}; routes are {sorted(self.config.routes)}")
            try:
                back = self._make_back(route_name, self.config.routes[route_name])
            except BridgeError:
                raise
            except Exception as exc:  # a back's factory (a plugin's too) failed: this route only
                log.exception("route %s: its back could not be made", route_name)
                raise BackUnavailable(f"route {route_name}: its back could not be made ({type(exc).__name__})") from exc
            self._backs[route_name] = back
        return back

    async def create(self, route_name: str, *, front: str | None = None, cwd: str = "", meta: dict[str, Any] | None = None, lazy: bool = False) -> Session:  # fmt: skip
        """A new live session, opened by `front` (its subscribers' `protocol`, or "cli").
        `lazy`: for a caller that starts a turn in it at once (A2A); its record is then
        stored with that turn's first flush, not before."""
        if not self.accepting:
            raise BackUnavailable(self.refusal)
        back = self.back_for(route_name)
        await self._make_room(route_name)  # before its record is stored: a refusal leaves nothing
        now = time.time()
        route = self.config.routes[route_name]
        record = SessionRecord(
            session_id=new_id(),
            route=route_name,
            cwd=cwd,
            front=front,
            created_at=now,
            updated_at=now,
            options={o.id: o.default or o.values[0].value for o in route.options},
            meta=meta or {},
        )
        if not self.cluster.solo:
            await self.cluster.acquire(record.session_id)  # a new id: free, so ours
        try:
            if not lazy:
                await self.store.put_session(record)
            session = await self._start(record, back)
        except BaseException:
            if not self.cluster.solo:
                with trio.CancelScope(shield=True):
                    await self.release_lease(record.session_id)
            raise
        log.info("session created", extra={"route": route_name, "session": record.session_id})
        self.changes.changed(record.session_id)
        if self.observer is not None:
            self.observer.session_opened(route_name)
        return session

    async def get(self, session_id: str) -> Session:
        """The live session, started from the store if needed; NotFound otherwise.

        Asking counts as a use (the idle sessions close least recently used first). A
        session that is closing is let go first (its events stored), then a fresh copy
        comes from the store: a caller never gets a session that turns it away."""
        live = self._live.get(session_id)
        if live is not None and live.closed:
            await live._gone.wait()  # within its bounded close (bridge/session/live.py `run`)
            live = self._live.get(session_id)
        if live is not None:
            live.last_used = trio.current_time()
            return live
        while session_id in self._pruning:  # retention is deleting it: gone, or kept, in a moment
            await self._pruned.wait()
        live = self._live.get(session_id)
        if live is not None:
            return live
        self._opening[session_id] = self._opening.get(session_id, 0) + 1
        try:  # until it is live: retention keeps it (`hold_from_prune`)
            if not self.cluster.solo:  # live on another instance: followed (bridge/session/owners.py)
                remote = await self._follow(session_id)
                if remote is not None:
                    return remote  # type: ignore[return-value]
            try:
                return await self._load(session_id)
            except BaseException:  # its lease taken for nothing: let it go (never renewed for ever)
                if not self.cluster.solo and session_id not in self._live:
                    with trio.CancelScope(shield=True):
                        await self.release_lease(session_id)
                raise
        finally:
            if self._opening[session_id] == 1:
                del self._opening[session_id]
            else:
                self._opening[session_id] -= 1

    async def _load(self, session_id: str) -> Session:
        live = self._live.get(session_id)
        if live is not None:
            return live
        record = await self._stored(session_id)
        live = self._live.get(session_id)  # another task may have started it meanwhile
        if live is not None:
            return live
        return await self._start(record, self.back_for(record.route))

    async def _start(self, record: SessionRecord, back: Back) -> Session:
        assert self._nursery is not None, "SessionManager.run() is not running"
        await self._make_room(record.route)
        live = self._live.get(record.session_id)  # started by another task while we made room
        if live is not None:
            return live
        # No task yet: the session starts its own with its first turn (`Session._spawn`).
        session = Session(self, record, self.config.routes[record.route], back)
        self._live[record.session_id] = session
        if len(self._live) > self.config.daemon.max_idle_sessions:
            self._check_idle.set()  # maybe one idle session too many: the sweep looks now
        return session

    async def _make_room(self, route_name: str) -> None:
        """Under the live-session caps (`[daemon] max_live_sessions`, the route's
        `max_live_sessions`), closing the longest-idle session of the full pool (it stays
        in the store; `get` brings it back); `Overloaded` when none of them is idle."""
        while True:
            total = self.config.daemon.max_live_sessions
            per_route = self.config.routes[route_name].max_live_sessions if route_name in self.config.routes else None
            if per_route is None and len(self._live) < total:
                return  # the common case, without a look at every live session
            # Sessions already closing are leaving (within their 5 s close): not counted,
            # so concurrent requests each make room instead of finding nothing idle.
            staying = [s for s in self._live.values() if not s._closed.is_set()]
            pool: list[Session] | None = None
            if len(staying) >= total:
                pool, what = staying, f"[daemon] max_live_sessions ({total})"
            elif per_route is not None:
                mine = [s for s in staying if s.record.route == route_name]
                if len(mine) >= per_route:
                    pool, what = mine, f"route {route_name!r} max_live_sessions ({per_route})"
            if pool is None:
                return
            idle = self._idle(pool, trio.current_time())
            if not idle:
                log.warning("new session refused: %s reached, none idle", what)
                raise Overloaded(f"too many live sessions: {what} reached and none is idle; try again later")
            _, victim = max(idle, key=lambda pair: pair[0])
            log.info("live-session cap reached: the longest-idle session closed", extra={"route": victim.record.route, "session": victim.id})
            await victim.close()
            await victim._gone.wait()  # its events stored before another copy could load it

    def hold_from_prune(self, session_id: str) -> bool:
        """Retention asks (bridge/store/retention.py): True keeps a session the daemon
        holds live or is loading; otherwise it is held back from loading until
        `release_pruned`, so it is never brought back live as its rows are deleted."""
        if session_id in self._live or session_id in self._opening:
            return True
        self._pruning.add(session_id)
        return False

    def release_pruned(self, session_ids: list[str]) -> None:
        self._pruning.difference_update(session_ids)
        self._pruned.set()
        self._pruned = trio.Event()

    def forget(self, session: Session) -> None:
        if self._live.get(session.id) is session:
            del self._live[session.id]
            self.changes.changed(session.id)  # closed

    def live(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    async def read_events(self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None) -> list[Event]:
        """The stored events in (after_seq, through_seq]."""
        out: list[Event] = []
        async for page in self.event_pages(session_id, after_seq, through_seq=through_seq):
            out.extend(page)
        return out

    async def event_pages(
        self, session_id: str, after_seq: int = 0, *, through_seq: int | None = None, batches: int = EVENT_PAGE_BATCHES
    ) -> AsyncIterator[list[Event]]:
        """The stored events in (after_seq, through_seq], `batches` stored batches at a
        time: a long history streams out in bounded pages, read from where it is wanted."""
        while True:
            found = await self.store.read_batches(session_id, after_seq=after_seq, through_seq=through_seq, limit=batches)
            page = [
                e for b in found for e in decode_events(b.blob)
                if e.seq > after_seq and (through_seq is None or e.seq <= through_seq)
            ]  # fmt: skip
            if page:
                yield page
            if len(found) < batches:
                return
            after_seq = found[-1].last_seq
            if through_seq is not None and after_seq >= through_seq:
                return
