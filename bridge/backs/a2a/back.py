"""The A2A back: turns run on a remote A2A agent, 1.0 or 0.3, over JSON-RPC or HTTP+JSON.

One `A2ABack` per route owns the route's HTTP link to the agent (`AgentHttp`: one
pooled client, the token, errors in words) and the agent card (cached:
`bridge.backs.a2a.cache`). The card chooses the interface and dialect
(`codecs.a2a_card`), names the agent (ACP `agentInfo`) and its skills (slash
commands). Every wire detail is in `codecs.a2a_client`, every translation in
`codecs.a2a`; the turns are `bridge.backs.a2a.turn`, their streams
`bridge.backs.a2a.stream`.

A session (A2A spec §3, contextId): the first message goes without `contextId`; the
one the agent returns is kept (also as the session's back ref) and sent from then
on. Each prompt is a new task, except while a task is interrupted (INPUT_REQUIRED or
AUTH_REQUIRED): then the next message continues it.

A turn streams (`SendStreamingMessage` / `message/stream`) when the card says the
agent can, else sends (`returnImmediately`, unless the route says otherwise) and polls
`GetTask`. A stream that breaks mid-task is re-attached with `SubscribeToTask`
(`tasks/resubscribe`), backing off, or polled with `GetTask` when the agent cannot
re-attach; the `TaskTracker` lets every piece through exactly once.

Cancel (A2A spec §3, CancelTask): `CancelTask`, then wait (within the route's
`cancel_grace_s`) for the task to reach a terminal state; the turn ends `cancelled`
even when the agent says the task is not cancelable.

Errors name the route and what failed, never a secret (DESIGN.md complaint 4).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
import httpx
import trio

from bridge.backs.a2a.cache import CardCache
from bridge.backs.a2a.http import AgentHttp, where
from bridge.backs.a2a.turn import A2ASession
from bridge.backs.base import AgentInfo, SessionContext
from bridge.codecs.a2a_card import CardError, CardView, auth_placement, choose_interface, commands, parse_card
from bridge.codecs.a2a_client import Wire
from bridge.errors import BackError
from bridge.schema.a2a import A2A_VERSION_HEADER

if TYPE_CHECKING:
    from bridge.backs.a2a.config import A2ABackConfig as A2AConfig
    from bridge.config import Route

__all__ = ["A2ABack"]

log = logging.getLogger("bridge.backs.a2a.back")

WELL_KNOWN = "/.well-known/agent-card.json"


class A2ABack:
    """The back of one route whose `back.kind` is "a2a"."""

    def __init__(self, name: str, route: Route) -> None:
        self.name = name
        self.route = route
        self.cfg: A2AConfig = route.back  # type: ignore[assignment]
        self.info = AgentInfo(name=name, title=route.title, version=route.version, description=route.description)
        self.http = AgentHttp(name, route)
        self.cache = CardCache(self.cfg.card_ttl_s)
        self.view: CardView | None = None
        self.redirected_to: str | None = None  # where the card was read, when a redirect led there
        self._card_lock: trio.Lock | None = None

    @property
    def wire(self) -> Wire | None:
        """The calls of the interface the card chose (None before the card is read)."""
        return self.http.wire

    # -- the card -------------------------------------------------------------------------
    async def ready(self) -> None:
        """Fetch the card before a front describes the agent (ACP initialize). Never raises:
        a failure is logged here and reported by the first prompt, where the user sees it."""
        try:
            with trio.move_on_after(self.cfg.connect_timeout_s):
                await self.card()
        except BackError as exc:
            log.warning("%s", exc.message)

    async def probe(self, *, deep: bool) -> str:
        """`doctor` and `/readyz`: the agent card is read (bridge/backs/a2a/probe.py), and
        the OAuth access token had (the cached one while it is fresh). For `doctor` (deep)
        only a card read at the configured URL itself counts: one reached through a
        redirect may be another agent's, and is reported as such."""
        from bridge.backs.a2a.probe import probe_card

        found = await probe_card(self)
        url = self.card_url()
        if deep and self.redirected_to is not None:
            raise self.http.error(
                f"the agent card at {where(url)} redirected to {where(self.redirected_to)}; a card found "
                "anywhere but the configured URL may be another agent's (set card_url to it if it is the one you mean)"
            )
        if self.http.oauth is not None:
            await self.http.oauth.token()
            found += f"; an OAuth access token from {self.http.oauth.where}"
        return found

    async def card(self) -> tuple[CardView, Wire]:
        """The agent card and the wire it chose; fetched or revalidated when stale."""
        if self.cache.fresh(trio.current_time()) and self.view is not None and self.wire is not None:
            return self.view, self.wire  # the common case, on every turn's critical path
        if self._card_lock is None:
            self._card_lock = trio.Lock()
        async with self._card_lock:
            now = trio.current_time()
            if not (self.cache.fresh(now) and self.view is not None and self.wire is not None):
                await self._fetch_card()
            assert self.view is not None and self.wire is not None
            return self.view, self.wire

    def card_url(self) -> str:
        """The one place the card is read: `card_url`, else `{url}/.well-known/agent-card.json`
        (A2A spec §8.2). Never the host's root card as well: a `url` whose path has no
        card is a mistake to report, not a reason to talk to another agent on that host."""
        if self.cfg.card_url:
            return self.cfg.card_url
        assert self.cfg.url is not None
        return self.cfg.url.rstrip("/") + WELL_KNOWN

    async def _fetch_card(self) -> None:
        url = self.card_url()
        # The version we would speak (A2A spec §3, service parameters: `A2A-Version`):
        # an agent serving both may answer with the card of that version.
        version = {"auto": "1.0"}.get(self.cfg.dialect, self.cfg.dialect)
        headers = {"Accept": "application/json", A2A_VERSION_HEADER: version, **self.cfg.headers, **self.cache.conditional_headers()}
        try:
            with trio.fail_after(self.cfg.connect_timeout_s + self.cfg.first_event_timeout_s):
                resp = await self.http.client.get(url, headers=headers, follow_redirects=True)
        except trio.TooSlowError:
            raise self.http.error(f"cannot read the agent card at {where(url)}: no answer in time", unavailable=True) from None
        except httpx.TransportError as exc:
            err = self.http.transport_error(exc, url)
            raise type(err)(f"{err.message} (reading the agent card at {where(url)})") from exc
        now = trio.current_time()
        if resp.status_code == 304 and self.cache.body is not None:
            self.cache.revalidated(resp.headers, now)
            return
        if resp.status_code != 200:
            phrase = f"{resp.status_code} {httpx.codes.get_reason_phrase(resp.status_code)}".strip()
            # Read there and nowhere else (A2A spec §8.2): a wrong path is the config's to fix.
            hint = "; check the route's url (its card is read at url + /.well-known/agent-card.json and nowhere else) or set card_url" if resp.status_code == 404 else ""
            raise self.http.error(f"cannot read the agent card at {where(url)}: it answered {phrase}{hint}", unavailable=resp.status_code >= 500)
        body = resp.content
        try:
            view = parse_card(body, str(resp.url))
            iface = choose_interface(view, self.cfg.dialect, self.cfg.binding)
            placement = auth_placement(view, header_override=self.cfg.auth_header) if self.http.has_token() else None
        except CardError as exc:
            raise self.http.error(f"cannot use the agent card at {where(url)}: {exc}") from exc
        self.http.no_subscribe = False
        self.cache.stored(url, body, resp.headers, now)
        self.redirected_to = str(resp.url) if resp.history else None
        if self.http.wire is None or self.http.wire.iface != iface:
            self.http.wire = Wire(iface)
            log.info("route %s: A2A %s over %s at %s", self.name, iface.dialect.value, iface.binding.value, where(iface.url))
        self.view, self.http.placement = view, placement
        r = self.route
        self.info = AgentInfo(
            name=view.name or self.name,
            title=r.title or view.name or None,
            version=view.version or r.version,
            description=r.description or view.description or None,
            commands=commands(view),
        )

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> A2ASession:
        return A2ASession(self.http, self.card, ctx)

    async def aclose(self) -> None:
        await self.http.aclose()

