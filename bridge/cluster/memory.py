"""Several instances in one process, for tests: the reference of `Cluster`'s behaviour.

A `MemoryHub` is what PostgreSQL is to `PgCluster`: the leases, the live instances, the
notifications. `hub.store(inner)` wraps a store so that each `save` with a batch (and
each `close_cut_turns`) wakes the session's watches on every instance, as PgStore's
`NOTIFY` does. Commands are encoded and decoded on the way, as they are on the wire.
Each instance renews its leases every third of the TTL and, as `PgCluster` does, calls
`on_lost` for one that another instance took meanwhile (it had expired). Time is trio's clock, so tests may move it with `trio.testing.MockClock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from bridge.cluster.base import (
    Command,
    CommandHandler,
    NotifiedWatch,
    OwnerGone,
    Reply,
    decode_command,
    decode_reply,
    encode,
    Watches,
    reply_error,
)
from bridge.store import Store

__all__ = ["MemoryCluster", "MemoryHub"]

log = logging.getLogger("bridge.cluster")


class _NotifyingStore:
    """The store, with a notification after each write that adds events."""

    def __init__(self, hub: MemoryHub, inner: Store) -> None:
        self._hub, self._inner = hub, inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def save(self, session: Any, **kw: Any) -> None:
        await self._inner.save(session, **kw)
        if kw.get("batch") is not None:
            self._hub.notify(session.session_id, session.last_seq)

    async def close_cut_turns(self) -> list[Any]:
        closed = await self._inner.close_cut_turns()
        for turn in closed:
            if turn.last_seq is not None:
                self._hub.notify(turn.session_id, turn.last_seq)
        return closed


class MemoryHub:
    def __init__(self, lease_ttl_s: float = 10.0) -> None:
        self.lease_ttl_s = lease_ttl_s
        self.leases: dict[str, tuple[str, float]] = {}  # session id -> (instance, expires at)
        self.instances: dict[str, MemoryCluster] = {}  # the running ones
        self.watches = Watches()

    def store(self, inner: Store) -> Store:
        return _NotifyingStore(self, inner)  # type: ignore[return-value]

    def notify(self, session_id: str, last_seq: int) -> None:
        self.watches.notify(session_id, last_seq)

    def instance(self, instance_id: str, *, forward_timeout_s: float = 15.0) -> MemoryCluster:
        return MemoryCluster(self, instance_id, forward_timeout_s=forward_timeout_s)

    def kill(self, instance_id: str) -> None:
        """As `kill -9`: the instance answers nothing more; its leases expire in time."""
        cluster = self.instances.pop(instance_id, None)
        if cluster is not None:
            cluster._dead = True


class MemoryCluster:
    solo = False

    def __init__(self, hub: MemoryHub, instance_id: str, *, forward_timeout_s: float = 15.0) -> None:
        self.hub, self.instance_id = hub, instance_id
        self.forward_timeout_s = forward_timeout_s
        self.on_lost: Callable[[str], None] = lambda sid: None
        self._handler: CommandHandler | None = None
        self._dead = False
        self._held: set[str] = set()  # the sessions whose lease this instance took
        self.counts = {"forwarded": 0, "served": 0, "forward_failures": 0}

    async def run(self, handler: CommandHandler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._handler = handler
        self.hub.instances[self.instance_id] = self
        task_status.started()
        try:
            while not self._dead:
                self._renew()
                await trio.sleep(self.hub.lease_ttl_s / 3)
        finally:
            if self.hub.instances.get(self.instance_id) is self:
                del self.hub.instances[self.instance_id]

    def _renew(self) -> None:
        """Every lease of ours `lease_ttl_s` ahead; one another instance took (it expired
        before this renewal) is lost: `on_lost`."""
        until = trio.current_time() + self.hub.lease_ttl_s
        for sid in list(self._held):
            held = self.hub.leases.get(sid)
            if held is not None and held[0] == self.instance_id:
                self.hub.leases[sid] = (self.instance_id, until)
                continue
            self._held.discard(sid)
            try:
                self.on_lost(sid)
            except Exception:
                log.exception("cluster: on_lost failed for session %s", sid)

    async def acquire(self, session_id: str) -> str | None:
        now = trio.current_time()
        held = self.hub.leases.get(session_id)
        if held is not None and held[0] != self.instance_id and held[1] > now:
            return held[0]  # alive or not: a killed instance's lease holds until it expires
        self.hub.leases[session_id] = (self.instance_id, now + self.hub.lease_ttl_s)
        self._held.add(session_id)
        return None

    async def release(self, session_id: str) -> None:
        self._held.discard(session_id)
        held = self.hub.leases.get(session_id)
        if held is not None and held[0] == self.instance_id:
            del self.hub.leases[session_id]

    async def forward(self, owner: str, command: Command) -> Reply:
        command.origin = self.instance_id
        target = self.hub.instances.get(owner)
        if target is None or target._handler is None:
            self.counts["forward_failures"] += 1
            raise OwnerGone(f"instance {owner} is gone; its sessions move to another instance within the lease time")
        self.counts["forwarded"] += 1
        wire = decode_command(encode(command))
        with trio.move_on_after(self.forward_timeout_s):
            try:
                reply = await target._handler(wire)
            except Exception as exc:  # the handler's own boundary failed: still an answer
                reply = reply_error(exc)
            target.counts["served"] += 1
            return decode_reply(encode(reply))
        self.counts["forward_failures"] += 1
        raise OwnerGone(f"instance {owner} did not answer in {self.forward_timeout_s:g} s")

    def watch(self, session_id: str) -> NotifiedWatch:
        return self.hub.watches.open(session_id)

    def stats(self) -> dict[str, int]:
        return {"leases": len(self._held), **self.counts}
