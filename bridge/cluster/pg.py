"""The cluster on PostgreSQL: every daemon sharing one `PgStore` is an instance.

What `Cluster` (bridge/cluster/base.py) promises, with `MemoryCluster` as the reference:

- Leases are rows of `leases` (bridge/cluster/pg_sql.py), taken in one statement and
  timed by the database clock. `run` renews this instance (`PgStore.heartbeat`) and the
  leases it holds (only those: one whose release failed expires) every third of
  `lease_ttl_s`, each renewal bounded by that third; a lease found no longer ours calls
  `on_lost`. When two thirds of `lease_ttl_s` passed since the last renewal that
  succeeded, every lease held is given up (`on_lost`): the session manager closes those
  sessions here before another instance may take them (no session runs on two).
  Every `lease_ttl_s` it sweeps: leases of gone instances are deleted, and when an
  instance is newly found expired, `close_cut_turns` ends its running turns.
- A command is a notification on the owner's channel: `c ORIGIN ID BODY`, BODY the
  encoded command, or `@ROW` when it is too large for a NOTIFY payload. The owner runs
  it with the handler (`SessionManager.serve_command`) in one of `WORKERS` tasks fed by
  a bounded queue, and answers `r ID BODY` on the origin's channel. `forward` fails at
  once with `OwnerGone` when the owner's instance row is missing or expired, and after
  `forward_timeout_s` without an answer.
- Watches: `PgStore.save` notifies `bridge_events` with "SESSION LAST_SEQ" in its
  transaction; that wakes this instance's watches of the session (a dict lookup for a
  session nobody here watches). After the LISTEN connection was lost and opened again,
  every watch wakes, since what was notified meanwhile is gone: its reader re-reads.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from bridge.cluster import pg_sql
from bridge.cluster.base import (
    Command, CommandHandler, NotifiedWatch, OwnerGone, Reply, Watches, decode_command, decode_reply, encode, reply_error,
)  # fmt: skip
from bridge.cluster.pg_listen import RECONNECTED, Listener, Note
from bridge.config import ClusterConfig
from bridge.errors import BridgeError, InternalError

__all__ = ["PgCluster"]

log = logging.getLogger("bridge.cluster")

WORKERS = 32  # commands served at once
INBOX = 1024  # commands waiting for a worker; past it one is answered Overloaded
OUTBOX = 1024  # notifications waiting to be sent (forwarders and workers wait past it)
SENDERS = 2  # tasks sending them, each up to BATCH in one transaction
BATCH = 128
SHUTDOWN_S = 2.0  # what stopping the LISTEN thread may take


class _Out:
    """A notification to send: a command (its forwarder waits for `done`) or a reply."""

    __slots__ = ("body", "done", "error", "header", "sent", "to")

    def __init__(self, to: str, header: str, body: bytes, done: trio.Event | None = None) -> None:
        self.to, self.header, self.body, self.done = to, header, body, done
        self.sent = False  # False after sending: `to` is no live instance
        self.error: BridgeError | None = None


class _Waiting:
    """A forwarded command waiting for its reply."""

    __slots__ = ("body", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.body = ""


class PgCluster:
    solo = False

    def __init__(self, store: Any, config: ClusterConfig) -> None:
        self._store = store  # a PgStore: owner, url, call, heartbeat, close_cut_turns
        self.config = config
        self.instance_id: str = store.owner
        self.on_lost: Callable[[str], None] = lambda sid: None
        self._held: dict[str, int] = {}  # session id -> when we took it (a counter)
        self._renewed_at = 0.0  # trio clock: when the last renewal that succeeded began
        self._stamps = itertools.count(1)
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._watches = Watches()
        self._inbox: trio.MemorySendChannel[tuple[str, str, str]] | None = None
        self._outbox: trio.MemorySendChannel[_Out] | None = None
        self._dropped = 0  # commands neither served nor answered since last logged
        self._ready = False
        self._listener: Listener | None = None
        self._setup_lock = trio.Lock()
        self._dead_seen: set[str] = set()
        self.counts = {"forwarded": 0, "served": 0, "forward_failures": 0}

    async def _call(self, fn: Callable[..., Any], *, abandon: bool = False, atomic: bool = True, **kw: Any) -> Any:
        return await self._store.call(functools.partial(fn, **kw), abandon=abandon, atomic=atomic)

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setup_lock:
            if not self._ready:
                await self._call(pg_sql.ensure_schema)
                self._ready = True

    # -- leases

    async def acquire(self, session_id: str) -> str | None:
        await self._setup()
        # One statement (a re-read after a race is safe apart): no BEGIN/COMMIT round trips,
        # which every new session and every session a client opens pays for.
        owner: str | None = await self._call(
            pg_sql.acquire, atomic=False, sid=session_id, me=self.instance_id, ttl=self.config.lease_ttl_s
        )
        if owner is None:
            self._held[session_id] = next(self._stamps)
        return owner

    async def release(self, session_id: str) -> None:
        # First: a renewal meanwhile does not call it lost, and if the DELETE fails no
        # renewal pushes it on (only held leases are): it expires within `lease_ttl_s`.
        self._held.pop(session_id, None)
        await self._setup()
        await self._call(pg_sql.release, atomic=False, sid=session_id, me=self.instance_id)  # one statement

    # -- the loop of `run`

    async def run(self, handler: CommandHandler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._setup()
        self._listener = listener = Listener(self._store.url, [pg_sql.EVENTS_CHANNEL, pg_sql.channel_of(self.instance_id)], self._on_notes)
        await trio.to_thread.run_sync(listener.connect)  # unreachable database: run fails here
        inbox_send, inbox = trio.open_memory_channel[tuple[str, str, str]](INBOX)
        outbox_send, outbox = trio.open_memory_channel[_Out](OUTBOX)
        listener.start(trio.lowlevel.current_trio_token())
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(SENDERS):
                    nursery.start_soon(self._send_loop, outbox)
                for _ in range(WORKERS):
                    nursery.start_soon(self._serve, handler, inbox, outbox_send)
                self._inbox, self._outbox = inbox_send, outbox_send
                self._renewed_at = trio.current_time()
                await self._renew()  # others see this instance alive before it says it started
                task_status.started()
                nursery.start_soon(self._sweep_loop)  # apart: a slow sweep never delays a renewal
                await self._keep()
        finally:
            self._inbox = self._outbox = None
            listener.stop()
            with trio.move_on_after(SHUTDOWN_S, shield=True):
                await self._stop(listener)

    async def _stop(self, listener: Listener) -> None:
        # Leases are let go by the session manager as it closes each session (drain);
        # one still held here expires within `lease_ttl_s` now that nothing renews it.
        self._held = {}
        try:
            await self._call(pg_sql.poke, abandon=True, me=self.instance_id)
        except BridgeError as exc:
            log.info("cluster: could not wake the LISTEN thread to stop (%s)", exc)
        await trio.to_thread.run_sync(listener.join, SHUTDOWN_S)

    async def _keep(self) -> None:
        period = self.config.lease_ttl_s / 3
        while True:
            # After a failure, sooner: a second try before the leases are given up.
            await trio.sleep(period if await self._renew() else period / 2)
            if self._dropped:
                log.warning("cluster: %d commands dropped, the queue of %d and the outbox full", self._dropped, INBOX)
                self._dropped = 0

    async def _sweep_loop(self) -> None:
        await trio.sleep(self.config.lease_ttl_s / 3)
        while True:
            await self._sweep()
            await trio.sleep(self.config.lease_ttl_s)

    async def _renew(self) -> bool:
        """Our instance row and the leases we hold, `lease_ttl_s` ahead; whether it worked.
        Each try is bounded so that, failing, the leases are given up (`_give_up`) two
        thirds of `lease_ttl_s` after the last renewal that worked: before they expire."""
        ttl = self.config.lease_ttl_s
        start = trio.current_time()
        deadline = self._renewed_at + 2 * ttl / 3
        if start >= deadline:
            self._give_up()
        ours: set[str] | None = None
        before = dict(self._held)
        bound = ttl / 3 if start >= deadline else min(ttl / 3, deadline - start)
        with trio.move_on_after(bound) as scope:
            try:
                await self._store.heartbeat()
                ours = await self._call(pg_sql.renew, abandon=True, me=self.instance_id, sids=list(before), ttl=ttl) if before else set()
            except BridgeError as exc:
                log.warning("cluster: could not renew this instance's leases (%s)", exc)
            except Exception:  # our bug: log it, renew again next period
                log.exception("cluster: renewing this instance's leases failed")
        if ours is None:
            if scope.cancelled_caught:
                log.warning("cluster: renewing this instance's leases took more than %g s: given up", bound)
            if trio.current_time() >= deadline:
                self._give_up()
            return False
        self._renewed_at = start
        for sid, stamp in before.items():
            if sid not in ours and self._held.get(sid) == stamp:
                del self._held[sid]
                log.warning("cluster: lost the lease of session %s to another instance", sid, extra={"session": sid})
                self._lost(sid)
        return True

    def _give_up(self) -> None:
        """Every lease held is lost: no renewal worked for two thirds of `lease_ttl_s`."""
        held, self._held = self._held, {}
        if held:
            log.warning(
                "cluster: no renewal for %g s: giving up the %d sessions held here before their leases expire",
                trio.current_time() - self._renewed_at, len(held),
            )  # fmt: skip
        for sid in held:
            self._lost(sid)

    def _lost(self, sid: str) -> None:
        try:
            self.on_lost(sid)
        except Exception:
            log.exception("cluster: on_lost failed for session %s", sid)

    async def _sweep(self) -> None:
        """Free the leases of gone instances; end the turns of newly expired ones."""
        try:
            dead = await self._call(pg_sql.sweep, message_max_age_s=2 * self.config.forward_timeout_s)
            if dead - self._dead_seen:
                closed = await self._store.close_cut_turns()
                log.info("cluster: instances %s stopped renewing; %d of their turns ended", sorted(dead - self._dead_seen), len(closed))
            self._dead_seen = dead
        except BridgeError as exc:
            log.warning("cluster: sweep failed (%s); again in %g s", exc, self.config.lease_ttl_s)
        except Exception:  # our bug: log it, sweep again next time
            log.exception("cluster: the sweep failed")

    # -- notifications, on the trio thread

    def _on_notes(self, notes: list[Note]) -> None:
        for channel, payload in notes:
            try:
                if (channel, payload) == RECONNECTED:
                    self._watches.kick_all()
                elif channel == pg_sql.EVENTS_CHANNEL:
                    sid, _, seq = payload.rpartition(" ")
                    self._watches.notify(sid, int(seq))
                elif payload.startswith("r "):
                    _, corr, body = payload.split(" ", 2)
                    waiting = self._waiting.get(int(corr))
                    if waiting is not None:
                        waiting.body = body
                        waiting.event.set()
                elif payload.startswith("c "):
                    _, origin, corr, body = payload.split(" ", 3)
                    self._take_command(origin, corr, body)
            except ValueError:
                log.warning("cluster: dropped a malformed notification on %s", channel)

    def _take_command(self, origin: str, corr: str, body: str) -> None:
        if self._inbox is None or self._outbox is None:
            return  # stopping: its sender times out and asks again
        try:
            self._inbox.send_nowait((origin, corr, body))
        except trio.WouldBlock:
            busy = Reply(error="Overloaded", message=f"instance {self.instance_id} has {INBOX} commands waiting; try again")
            try:
                self._outbox.send_nowait(_Out(origin, f"r {corr} ", encode(busy)))
            except trio.WouldBlock:
                self._dropped += 1  # its sender times out (logged once per renewal)

    async def _send_loop(self, outbox: trio.MemoryReceiveChannel[_Out]) -> None:
        """Send what waits in the outbox, up to `BATCH` notifications per transaction."""
        async for first in outbox:
            batch = [first]
            while len(batch) < BATCH:
                try:
                    batch.append(outbox.receive_nowait())
                except trio.WouldBlock:
                    break
            try:
                sent = await self._call(pg_sql.send_many, notes=[(o.to, o.header, o.body) for o in batch])
            except BridgeError as exc:
                log.warning("cluster: could not send %d commands or replies (%s)", len(batch), exc)
                sent = [False] * len(batch)
                for o in batch:
                    o.error = exc
            except Exception:  # our bug: these are lost, the next batch goes
                log.exception("cluster: sending %d commands or replies failed", len(batch))
                sent = [False] * len(batch)
                for o in batch:
                    o.error = InternalError("this instance failed to send the command")
            for o, ok in zip(batch, sent):
                o.sent = ok
                if o.done is not None:
                    o.done.set()

    async def _body(self, body: str) -> bytes | None:
        if not body.startswith("@"):
            return body.encode()
        try:
            message_id = int(body[1:])
        except ValueError as exc:
            raise InternalError(f"a message names no row: {body[:40]!r}") from exc
        return await self._call(pg_sql.take_body, message_id=message_id)

    # -- commands

    async def _serve(
        self, handler: CommandHandler, inbox: trio.MemoryReceiveChannel[tuple[str, str, str]], outbox: trio.MemorySendChannel[_Out]
    ) -> None:
        async for origin, corr, body in inbox:
            try:
                data = await self._body(body)
                if data is None:
                    log.warning("cluster: the body of a command from %s was already swept", origin)
                    continue
                reply = await self._answer(handler, data, origin)
                await outbox.send(_Out(origin, f"r {corr} ", encode(reply)))
            except BridgeError as exc:  # the database failed: the sender times out
                log.warning("cluster: could not answer a command from %s (%s)", origin, exc)
            except Exception:  # our bug: this command is lost, the worker serves on
                log.exception("cluster: answering a command from %s failed", origin)

    async def _answer(self, handler: CommandHandler, data: bytes, origin: str) -> Reply:
        try:
            command = decode_command(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("cluster: an undecodable command from %s: %s", origin, exc)
            return Reply(error="InvalidRequest", message=f"not a command: {exc}")
        self.counts["served"] += 1
        try:
            return await handler(command)
        except Exception as exc:  # the handler's own boundary failed: still an answer
            log.exception("cluster: serving %s for session %s failed", type(command).__name__, command.session_id)
            return reply_error(exc)

    async def forward(self, owner: str, command: Command) -> Reply:
        outbox = self._outbox
        if outbox is None:
            self.counts["forward_failures"] += 1
            raise OwnerGone("this instance is not serving the cluster (it is starting or stopping)")
        command.origin = self.instance_id
        corr = next(self._ids)
        waiting = self._waiting[corr] = _Waiting()
        out = _Out(owner, f"c {self.instance_id} {corr} ", encode(command), trio.Event())
        try:
            with trio.move_on_after(self.config.forward_timeout_s):
                await outbox.send(out)
                await out.done.wait()  # type: ignore[union-attr]
                if out.error is not None:  # the database failed: not forwarded
                    self.counts["forward_failures"] += 1
                    raise type(out.error)(out.error.message) from out.error
                if not out.sent:
                    self.counts["forward_failures"] += 1
                    raise OwnerGone(f"instance {owner} is gone; its sessions move to another instance within the lease time")
                self.counts["forwarded"] += 1
                await waiting.event.wait()
                data = await self._body(waiting.body)
                if data is None:
                    raise InternalError(f"the reply of instance {owner} was swept before it was read")
                try:
                    return decode_reply(data)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise InternalError(f"instance {owner} sent a reply that does not decode: {exc}") from exc
        finally:
            del self._waiting[corr]
        self.counts["forward_failures"] += 1
        raise OwnerGone(f"instance {owner} did not answer in {self.config.forward_timeout_s:g} s")

    def watch(self, session_id: str) -> NotifiedWatch:
        return self._watches.open(session_id)

    def stats(self) -> dict[str, int]:
        return {"leases": len(self._held), **self.counts}
