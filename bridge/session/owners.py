"""The session manager's side of the cluster (bridge/cluster/base.py): which instance runs
a session live, following the sessions others run, serving the commands they forward.

`SessionManager` mixes this in. With a `SoloCluster` (one daemon alone) none of it runs:
`get` never asks for a lease and nothing is forwarded.

- `_follow(sid)`: take the session's lease (None: ours, load it) or a `RemoteSession`
  following its owner (one per session, kept while used: idle ones close like idle live
  sessions).
- `serve_command`: a command another instance forwarded, run on our live session; a
  prompt for an idle session nobody uses here moves the session to the sender instead
  (`_hands_over`).
- `rehome`: a followed session's owner let it go or is gone: find where it lives now.
- `release_lease`: a live session closed here (its events stored): the lease goes.
- `_lease_lost`: another instance took a lease of ours (we stopped renewing in time):
  our copy of that session closes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from bridge.cluster.base import (
    AnswerCmd,
    CancelCmd,
    Cluster,
    Command,
    DescribeCmd,
    FlushCmd,
    Moved,
    OptionCmd,
    PromptCmd,
    PutCmd,
    Reply,
    WatchCmd,
    reply_error,
)
from bridge.core.identity import ANONYMOUS
from bridge.errors import BackUnavailable, BridgeError, NotFound
from bridge.session.remote import RemoteSession

if TYPE_CHECKING:
    from bridge.config import Config
    from bridge.session.live import Session
    from bridge.store import SessionRecord, Store

__all__ = ["Owners"]

log = logging.getLogger("bridge.session")

_PROCESS_BACKS = frozenset({"acp"})  # backs whose session is a process: never moved while it runs well


class Owners:
    """Mixed into `SessionManager` (which sets `cluster`, `config`, `store`, `_live`)."""

    cluster: Cluster
    config: Config
    store: Store
    keep_alive: list[Callable[[Session], bool]]
    _live: dict[str, Session]
    _remote: dict[str, RemoteSession]

    def _open_owners(self) -> None:
        self._remote = {}
        self._following: dict[str, trio.Lock] = {}  # one follower made at a time per session
        self.cluster.on_lost = self._lease_lost

    async def _follow(self, session_id: str) -> RemoteSession | None:
        """None when the lease is ours now (the caller loads the session); else the
        session as followed from its owner: one follower per session, however many
        ask at once, registered before it starts so none is ever left untracked."""
        lock = self._following.get(session_id)
        if lock is None:
            lock = self._following[session_id] = trio.Lock()
        try:
            async with lock:
                return await self._follow_locked(session_id)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._following.pop(session_id, None)

    async def _follow_locked(self, session_id: str) -> RemoteSession | None:
        owner = await self.cluster.acquire(session_id)
        if owner is None:
            return None
        remote = self._remote.get(session_id)
        if remote is not None and remote.owner == owner and not remote.closed:
            remote.last_used = trio.current_time()
            await remote.refresh()
            return remote
        record = await self._stored(session_id)
        old = self._remote.get(session_id)  # following an owner that let it go
        remote = self._remote[session_id] = RemoteSession(self, record, owner, self.config.routes[record.route])  # type: ignore[arg-type]
        try:
            await remote.start()
        except BaseException:
            if self._remote.get(session_id) is remote:
                del self._remote[session_id]
            with trio.CancelScope(shield=True):
                await remote.close()
            raise
        if old is not None and not old.closed:
            await old.hand_on(remote)
        return remote

    async def _stored(self, session_id: str) -> SessionRecord:
        """The session's record, for a route configured here; NotFound otherwise."""
        record = await self.store.get_session(session_id)
        if record is None:
            raise NotFound(f"unknown session {session_id!r}")
        if record.route not in self.config.routes:
            raise NotFound(f"session {session_id!r} belongs to route {record.route!r}, which is not configured")
        return record

    async def rehome(self, remote: RemoteSession, *, gone: bool = False) -> None:
        """`remote`'s owner answered `Moved` (it let the session go) or not at all
        (`gone`): the session's new home (this instance, or another) takes over.

        An owner that answered `Moved` but still holds the lease is closing the session
        (bounded: its last flush, then the release): asked again with a backoff, within
        the lease TTL. An owner that does not answer keeps the lease until it expires."""
        ttl = self.config.cluster.lease_ttl_s
        owner = await self.cluster.acquire(remote.id)
        delay, waited = 0.02, 0.0
        while owner is not None and owner == remote.owner and not gone and waited < ttl:
            await trio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 0.5)
            owner = await self.cluster.acquire(remote.id)
        if owner is not None and owner == remote.owner:
            what = "does not answer" if gone else "does not let it go"
            raise BackUnavailable(
                f"the instance running session {remote.id} {what}; if it stopped, another "
                f"instance takes the session over within {ttl:g} s: retry then"
            )
        if self._remote.get(remote.id) is remote:
            del self._remote[remote.id]
        home = await self.get(remote.id)  # type: ignore[attr-defined]  # the lease ours (loaded here) or another's
        if home is not remote:
            await remote.hand_on(home)

    async def release_lease(self, session_id: str) -> None:
        if self.cluster.solo:
            return
        try:
            await self.cluster.release(session_id)
        except Exception as exc:  # it expires on its own within the TTL
            log.warning("session %s: its lease could not be released (%s); it expires on its own", session_id, exc)

    def _lease_lost(self, session_id: str) -> None:
        live = self._live.get(session_id)
        if live is not None and not live.closed:
            log.warning("session %s: another instance took its lease (this one did not renew in time); closed here",
                        session_id)  # fmt: skip
            live.manager.lend_nursery().start_soon(live.close)

    async def serve_command(self, command: Command) -> Reply:
        """Run a command another instance forwarded for a session whose lease is ours;
        `Reply(error="Moved")` when it is not live here. Its errors become the reply."""
        try:
            return await self._serve(command)
        except BridgeError as exc:
            return reply_error(exc)
        except Exception as exc:  # our bug: that command fails, the instance goes on
            log.exception("a forwarded %s for session %s failed", type(command).__name__, command.session_id)
            return reply_error(exc)

    async def _serve(self, cmd: Command) -> Reply:
        session = self._live.get(cmd.session_id)
        if session is None or session.closed:
            raise Moved(f"session {cmd.session_id} is not live on instance {self.cluster.instance_id}")
        if isinstance(cmd, PromptCmd):
            if self._hands_over(session):
                log.info("session %s moves to instance %s, where its prompts come from", session.id, cmd.origin)
                await session.close()
                await session._gone.wait()  # stored, its lease released: the sender takes it
                raise Moved(f"session {cmd.session_id} moved to the instance its prompts come from")
            turn = await session.begin_turn(
                cmd.content, message_id=cmd.message_id, meta=cmd.meta, turn_id=cmd.turn_id, record_meta=cmd.record_meta,
                identity=cmd.identity or ANONYMOUS, front=cmd.front,
            )
            return Reply(turn=turn.record)
        if isinstance(cmd, AnswerCmd):
            await session.send_answer(cmd.question_id, selected=cmd.selected, text=cmd.text, values=cmd.values,
                                      cancelled=cmd.cancelled, by=cmd.by)  # fmt: skip
            return Reply()
        if isinstance(cmd, CancelCmd):
            return Reply(value=await session.send_cancel())
        if isinstance(cmd, OptionCmd):
            return Reply(options=await session.set_option(cmd.option_id, cmd.value))
        if isinstance(cmd, PutCmd):
            if cmd.states:
                session.put_states(cmd.states)
            for task in cmd.tasks:
                session.stage_task(task)
            await session.save_record()
            return Reply()
        if isinstance(cmd, FlushCmd):
            await session.flush()
            return Reply()
        if isinstance(cmd, WatchCmd):
            session.remote_watchers = max(0, session.remote_watchers + (1 if cmd.on else -1))
            if cmd.on:
                session.last_used = trio.current_time()
            return Reply()
        if isinstance(cmd, DescribeCmd):
            return Reply(busy=session.busy, commands=session.commands(), options=session.config_options())
        raise Moved(f"unknown command {type(cmd).__name__}")  # pragma: no cover - the union is closed

    def _hands_over(self, session: Session) -> bool:
        """A prompt forwarded for an idle session nobody here uses moves the session to
        the instance it came from (its clients are there: later turns run there without
        a hop), unless its back is a process of its own (an ACP agent), which a move
        would restart."""
        route = self.config.routes.get(session.record.route)
        tag = getattr(getattr(type(route.back), "__struct_config__", None), "tag", None) if route else None
        return (
            route is not None and tag not in _PROCESS_BACKS and not session.busy and not session._subscribers
            and session.client_services is None and session.remote_watchers <= 1
            and not any(keep(session) for keep in self.keep_alive)
        )  # fmt: skip

    def _followed(self) -> list[Any]:
        return list(self._remote.values())

    async def _close_followed(self) -> None:
        for remote in list(self._remote.values()):
            await remote.close()
        self._remote.clear()

