"""`GET /api/changes`: the change feed a live list of sessions follows (SSE).

`event: session` with the session as a listing shows it (bridge/fronts/chat/views.py
`SessionViews.info`) when it is created, a turn starts or ends, a question is asked or
answered, it is closed (bridge/session/changes.py says who tells); `event: deleted`
with `{"session_id"}` when it is deleted. Coalesced: the sessions that changed are a
set, sent as one batch, at most one batch per `COALESCE_S`, so a session appears at
most once per batch however many turns it ran meanwhile. Bounded: more than
`[ws] changes_max_pending` sessions waiting for one client become `event: reset`
(`{}`: read the list again). `: ping` after `[ws] events_heartbeat_s` without a write.
The stream ends when its caller's token expires (the client reconnects with a fresh one).

A client hears only of the sessions its caller may list (README: "Access control"):
a change of a running session it may not list is dropped as it is heard (so others'
activity neither reaches nor fills its bounded set), one of a stored session is checked
when its frame is made, and `deleted` is sent only if the caller could list the session
as it was (the deleted record travels with the news). A reload that changes what the
caller may list sends `event: reset`.

In a cluster the feed hears of the sessions this instance runs or follows; a client
refetches the list now and then for the others.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from bridge.codecs.sse import encode_event
from bridge.core.identity import ANONYMOUS, Identity, of_scope
from bridge.fronts import owners
from bridge.fronts.chat.events_api import CanonicalApi, query_ints
from bridge.fronts.expiry import expiry
from bridge.fronts.chat.sse_out import SseOut
from bridge.fronts.chat.views import SessionViews
from bridge.fronts.http import Scope
from bridge.store import SessionRecord

__all__ = ["COALESCE_S", "ChangeFeed"]

COALESCE_S = 0.25
_enc = msgspec.json.Encoder()
_RESET = encode_event(b"{}", event="reset")

log = logging.getLogger("bridge.fronts.chat.events")


class _Deleted:
    """A session deleted, as it was (None: not known)."""

    __slots__ = ("record",)

    def __init__(self, record: SessionRecord | None) -> None:
        self.record = record


class _Pending:
    """One client's changed sessions (a ChangeListener): id → None (changed) or _Deleted."""

    __slots__ = ("dirty", "reset", "limit", "_wake", "_hides")

    def __init__(self, limit: int, hides: Callable[[SessionRecord], bool]) -> None:
        self.dirty: dict[str, _Deleted | None] = {}
        self.reset = False
        self.limit = limit
        self._wake = trio.Event()
        self._hides = hides  # whether the caller may not list this session

    def _note(self, session_id: str, deleted: _Deleted | None) -> None:
        if self.reset:
            return
        if session_id not in self.dirty and len(self.dirty) >= self.limit:
            self.reset, self.dirty = True, {}
        else:
            self.dirty[session_id] = deleted or self.dirty.get(session_id)
        self._wake.set()

    def reset_all(self) -> None:
        """What the client lists may be wrong as a whole: it reads the list again."""
        self.reset, self.dirty = True, {}
        self._wake.set()

    def changed(self, session_id: str, record: SessionRecord | None = None) -> None:
        if record is not None and self._hides(record):
            return
        self._note(session_id, None)

    def deleted(self, session_id: str, record: SessionRecord | None = None) -> None:
        if record is not None and self._hides(record):
            return
        self._note(session_id, _Deleted(record))

    async def wait(self) -> None:
        await self._wake.wait()
        self._wake = trio.Event()


class ChangeFeed:
    def __init__(self, canonical: CanonicalApi) -> None:
        self.canonical = canonical
        self.manager = canonical.manager
        self.views = SessionViews(canonical.manager)

    async def open(self, scope: Scope, params: dict[str, str]) -> Identity:
        query_ints(scope, ())  # no parameter: one named is a mistake (400)
        return of_scope(scope)  # it sees the sessions it may list (bridge/fronts/owners.py)

    async def serve(self, opened: Identity, send: Any, receive: Any, cors: list[tuple[str, str]]) -> None:
        out = self.canonical.out()
        pending = _Pending(self.canonical.cfg.changes_max_pending, functools.partial(self._hides, opened))
        unlisten = self.manager.changes.listen(_Heard(pending, self.manager))
        view = _View(self.manager, opened, pending)
        out.on_close = lambda: (unlisten(), view.release())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run, pending, out, opened)
            try:
                await self.canonical.serve_out(out, send, receive, cors, also=(functools.partial(expiry, opened),))
            finally:
                out.close()
                nursery.cancel_scope.cancel()

    async def _run(self, pending: _Pending, out: SseOut, who: Identity = ANONYMOUS) -> None:
        while not out.closed:
            await pending.wait()
            if pending.reset:
                pending.reset = False
                out.put(_RESET)
            batch, pending.dirty = pending.dirty, {}
            try:
                for session_id, deleted in batch.items():
                    frame = await self._frame(session_id, deleted, who)
                    if frame is not None:
                        out.put(frame)
            except Exception:  # the store failed (or our bug): this client's feed ends; it reconnects
                log.exception("change feed: a session could not be read; the feed ends")
                out.close()
                return
            await trio.sleep(COALESCE_S)  # what changes meanwhile waits: one batch per COALESCE_S

    def _hides(self, who: Identity, record: SessionRecord) -> bool:
        return not owners.visible(self.manager.config, [record], who)

    async def _frame(self, session_id: str, deleted: _Deleted | None, who: Identity = ANONYMOUS) -> bytes | None:
        if deleted is not None:
            # Who could list it as it was; when that is not known, nobody is told once rules exist.
            known = deleted.record is not None or not owners.ruled(self.manager.config)
            if not known or (deleted.record is not None and self._hides(who, deleted.record)):
                return None
            return encode_event(_enc.encode({"session_id": session_id}), event="deleted")
        live = self.manager.live(session_id)
        record = live.record if live is not None else await self.manager.store.get_session(session_id)
        if record is None:  # deleted (said already), or never stored (a lazy session that closed)
            return None
        if self._hides(who, record):
            return None
        return encode_event(_enc.encode(self.views.info(record)), event="session")


class _ViewChanged(Exception):
    """A reload changed what the caller may list."""


class _View:
    """What the caller may list, held on the reload (bridge/session/grants.py): rules that
    change it make the client read the list again (`event: reset`)."""

    __slots__ = ("who", "pending", "visible", "release")

    def __init__(self, manager: Any, who: Identity, pending: _Pending) -> None:
        self.who, self.pending = who, pending
        self.visible = owners.visibility(manager.config, who)
        self.release = manager.grants.hold(self._check, self._reset, once=False)

    def _check(self, config: Any) -> BaseException | None:
        visible = owners.visibility(config, self.who)
        if visible == self.visible:
            return None
        self.visible = visible
        return _ViewChanged()

    def _reset(self, _: BaseException) -> None:
        self.pending.reset_all()


class _Heard:
    """What the feed hears (a ChangeListener): a change of a running session comes with
    its record, so one the caller may not list is dropped before it takes a place."""

    __slots__ = ("pending", "manager")

    def __init__(self, pending: _Pending, manager: Any) -> None:
        self.pending, self.manager = pending, manager

    def changed(self, session_id: str) -> None:
        live = self.manager.live(session_id)
        self.pending.changed(session_id, live.record if live is not None else None)

    def deleted(self, session_id: str, record: SessionRecord | None = None) -> None:
        self.pending.deleted(session_id, record)
