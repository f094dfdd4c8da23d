"""The session manager as the daemon drives it: reload, drain, stop, abort, and the
counts `/metrics` shows (bridge/session/manager.py mixes this into `SessionManager`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from bridge.backs.base import Back
from bridge.config import Config
from bridge.prompts.registry import PromptRegistry
from bridge.session.grants import Grants

if TYPE_CHECKING:
    from bridge.session.live import Session

__all__ = ["Lifecycle"]

log = logging.getLogger("bridge.session")


class Lifecycle:
    """Mixed into `SessionManager` (which sets what is declared here)."""

    config: Config
    prompts: PromptRegistry
    accepting: bool
    refusal: str
    stopping: trio.Event
    aborted: bool
    grants: Grants
    _live: dict[str, Session]
    _backs: dict[str, Back]
    _nursery: trio.Nursery | None
    _close_followed: Callable[[], Awaitable[None]]

    async def close_all(self) -> None:
        await self._close_followed()
        for session in list(self._live.values()):
            if self.aborted:
                return  # `abort` stopped every session
            await session.close()

    # -- the daemon: reload, shutdown, metrics ------------------------------------------------
    def live_counts(self) -> dict[str, tuple[int, int]]:
        """route → (live sessions, running turns)."""
        counts: dict[str, tuple[int, int]] = {}
        for s in self._live.values():
            n, t = counts.get(s.record.route, (0, 0))
            counts[s.record.route] = (n + 1, t + (1 if s.busy else 0))
        return counts

    def reconfigure(self, config: Config) -> tuple[dict[str, Back], list[Session]]:
        """Use `config` from now on. New and changed routes serve new sessions; live
        sessions keep the route they started with; those of removed routes are retired.
        Returns the backs no new session will use (of changed and removed routes, by
        route name) and the sessions retired. What the new access rules refuse is
        ended now (bridge/session/grants.py)."""
        old, self.config = self.config, config
        revoked = self.grants.recheck(config)
        if revoked:
            log.info("reload: %d stream(s) ended: the new access rules refuse their callers", revoked)
        self.prompts.reconfigure(config)
        dropped = {
            name: self._backs.pop(name)
            for name in list(self._backs)
            if name not in config.routes or config.routes[name] != old.routes.get(name)
        }
        retired = [s for s in self._live.values() if s.record.route not in config.routes]
        for session in retired:
            session.retired = True
        return dropped, retired

    async def drain(self, grace_s: float, *, sessions: list[Session] | None = None) -> int:
        """Let running turns finish within `grace_s`, then cancel the rest and wait for
        them to end (each within its route's cancel grace). Returns how many were cancelled."""
        live = list(self._live.values()) if sessions is None else sessions
        turns = [s.turn for s in live if s.turn is not None and s.busy]
        if not turns:
            return 0
        with trio.move_on_after(grace_s):
            for turn in turns:
                await turn.wait()
        late = [t for t in turns if not t._done.is_set()]
        for turn in late:
            log.info("turn still running after %g s: cancelled", grace_s,
                     extra={"route": turn.session.record.route, "session": turn.session.id, "turn": turn.turn_id})  # fmt: skip
            turn.session.cancel()
        with trio.move_on_after(max((t.session.route.cancel_grace_s for t in late), default=0) + 1):
            for turn in late:
                await turn.wait()
        return len(late)

    def stop_accepting(self, refusal: str) -> None:
        """The daemon stops: refuse new sessions and turns from now on, saying `refusal`."""
        self.accepting = False
        self.refusal = refusal
        self.stopping.set()

    def abort(self) -> None:
        """Stop every session now (a second SIGTERM): their backs still end their processes."""
        self.aborted = True
        self.stop_accepting(self.refusal)
        if self._nursery is not None:
            for session in list(self._live.values()):
                session._closed.set()
                session._wake()  # a session without a task gets one to store its last events
            self._nursery.cancel_scope.cancel()
