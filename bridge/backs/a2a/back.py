"""The A2A back: turns run on a remote A2A agent, 1.0 or 0.3, over JSON-RPC or HTTP+JSON.

One `A2ABack` per route owns one `httpx.AsyncClient` (pooled, `trust_env=False`,
bounded connections) and the agent card (cached: `a2a_cache`). The card chooses the
interface and dialect (`codecs.a2a_card`), names the agent (ACP `agentInfo`) and its
skills (slash commands). Every wire detail is in `codecs.a2a_wire`, every
translation in `codecs.a2a`; this module only does I/O, deadlines and policy.

A session (protocols.md §6.1): the first message goes without `contextId`; the one
the agent returns is kept (also as the session's back ref) and sent from then on.
Each prompt is a new task, except while a task is interrupted (INPUT_REQUIRED or
AUTH_REQUIRED): then the next message continues it.

A turn streams (`SendStreamingMessage` / `message/stream`) when the card says the
agent can, else sends (`returnImmediately`, unless the route says otherwise) and polls
`GetTask`. A stream that breaks mid-task is re-attached with `SubscribeToTask`
(`tasks/resubscribe`), backing off, or polled with `GetTask` when the agent cannot
re-attach; the `TaskTracker` lets every piece through exactly once.

Cancel (§6.6): `CancelTask`, then wait (within the route's `cancel_grace_s`) for the
task to reach a terminal state; the turn ends `cancelled` even when the agent says
the task is not cancelable.

Errors name the route and what failed, never a secret (DESIGN.md complaint 4).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import trio

from bridge import __version__
from bridge.backs.a2a.cache import CardCache
from bridge.backs.base import AgentInfo, SessionContext
from bridge.backs.secrets import Secret, read_token
from bridge.codecs.a2a_card import AuthPlacement, CardError, CardView, auth_placement, choose_interface, commands, parse_card
from bridge.codecs.a2a_wire import HttpCall, InvalidResponse, Wire
from bridge.codecs.sse import EventTooLarge, SSEDecoder
from bridge.errors import BackError, BackUnavailable
from bridge.schema import a2a as s

if TYPE_CHECKING:
    from bridge.backs.a2a.config import A2ABackConfig as A2AConfig
    from bridge.config import Route

__all__ = ["A2ABack", "Broken", "stream_events"]

log = logging.getLogger("bridge.backs.a2a.back")
# httpx logs every request at INFO; on a streaming turn that drowns the bridge's own lines.
logging.getLogger("httpx").setLevel(logging.WARNING)

WELL_KNOWN = "/.well-known/agent-card.json"


def _origin(url: str) -> str:
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return f"{u.scheme}://{(u.hostname or '').lower()}:{port}"


def _where(url: str) -> str:
    """A URL fit for an error message: no query, no user info."""
    u = urlsplit(url)
    host = u.hostname or ""
    return f"{u.scheme}://{host}{':' + str(u.port) if u.port else ''}{u.path}"


def _ssl_reason(exc: BaseException) -> str | None:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ssl.SSLError):
            reason = (e.reason or "").replace("_", " ").lower() or str(e)
            detail = getattr(e, "verify_message", None)
            return f"{reason}: {detail}" if detail else reason
        e = e.__cause__ or e.__context__
    return None


class Broken(Exception):
    """The event stream failed in a way worth resuming; `error` is what to report if
    it cannot be (or if there is nothing to resume yet)."""

    def __init__(self, reason: str, error: BackError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


class A2ABack:
    """The back of one route whose `back.kind` is "a2a"."""

    def __init__(self, name: str, route: Route) -> None:
        self.name = name
        self.route = route
        self.cfg: A2AConfig = route.back  # type: ignore[assignment]
        self.info = AgentInfo(name=name, title=route.title, version=route.version, description=route.description)
        self.cache = CardCache(self.cfg.card_ttl_s)
        self.view: CardView | None = None
        self.wire: Wire | None = None
        self._placement: AuthPlacement | None = None
        self._client: httpx.AsyncClient | None = None
        self._card_lock: trio.Lock | None = None
        self.no_subscribe = False  # the agent cannot re-attach to a stream: poll instead
        base = self.cfg.card_url or self.cfg.url or ""
        self._origins = {_origin(base)} | {_origin(o) for o in self.cfg.auth_origins}

    # -- plumbing ---------------------------------------------------------------------------
    def fail(self, what: str, *, unavailable: bool = False) -> BackError:
        cls = BackUnavailable if unavailable else BackError
        return cls(f"route {self.name}: {what}")

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            cfg = self.cfg
            verify: ssl.SSLContext | bool = True
            if cfg.ca_file:
                try:
                    verify = ssl.create_default_context(cafile=cfg.ca_file)
                except OSError as exc:
                    raise self.fail(f"cannot read ca_file {cfg.ca_file}: {exc.strerror or exc}") from exc
            self._client = httpx.AsyncClient(
                trust_env=False,
                verify=verify,
                follow_redirects=False,  # a redirect must not carry our token elsewhere
                timeout=httpx.Timeout(None, connect=cfg.connect_timeout_s, pool=cfg.connect_timeout_s),
                limits=httpx.Limits(max_connections=cfg.max_connections, max_keepalive_connections=cfg.max_connections),
                headers={"User-Agent": f"agent-bridge/{__version__}"},
            )
        return self._client

    def _token(self) -> Secret | None:
        """The token, read now (rotation needs no restart); never in a message."""
        return read_token(self.cfg.token_env, self.cfg.token_file, self.fail)

    def headers(self, url: str) -> dict[str, str]:
        """Configured headers plus the token, for a call to `url` (only to our origins)."""
        out = dict(self.cfg.headers)
        token = self._token()
        if token is None:
            return out
        if _origin(url) not in self._origins:
            raise self.fail(
                f"the agent card sends calls to {_origin(url)}, not the configured origin; agent-bridge does not send "
                "the route's token there (add that origin to auth_origins if it is meant to have it)"
            )
        assert self._placement is not None
        out[self._placement.header] = self._placement.prefix + token.reveal()
        return out

    def _auth_hint(self) -> str:
        if self.cfg.token_env:
            return f"check the token in ${self.cfg.token_env}"
        if self.cfg.token_file:
            return f"check the token in {self.cfg.token_file}"
        return "no token is configured: set token_env or token_file"

    def http_error(self, call: HttpCall, resp: httpx.Response, body: bytes) -> BackError:
        """A non-2xx answer, in words: who answered what to which call."""
        status = resp.status_code
        phrase = f"{status} {httpx.codes.get_reason_phrase(status)}".strip()
        assert self.wire is not None
        err = self.wire.decode_http_error(status, body)
        detail = f": {err}" if err else ""
        where = f"the A2A agent at {_where(call.url)}"
        if status in (401, 403):
            return self.fail(f"{where} answered {phrase} ({self._auth_hint()}){detail}")
        if status == 429:
            # Reported, not retried: a plain BackError, which no resume loop retries.
            after = resp.headers.get("retry-after")
            wait = f", retry after {after} s" if after else ""
            return self.fail(f"{where} answered {phrase}{wait}; not retried{detail}")
        if status == 404:
            return self.fail(f"{where} answered {phrase} to {call.method} (is the url right?){detail}")
        return self.fail(f"{where} answered {phrase}{detail}", unavailable=status >= 500)

    def transport_error(self, exc: Exception, url: str) -> BackError:
        where = _origin(url)
        tls = _ssl_reason(exc)
        if tls is not None:
            hint = "" if self.cfg.ca_file else "; if it uses a private CA, set ca_file"
            return self.fail(f"TLS with the A2A agent at {where} failed: {tls}{hint}", unavailable=True)
        if isinstance(exc, httpx.ConnectTimeout):
            return self.fail(
                f"cannot reach the A2A agent at {where}: no connection within connect_timeout_s "
                f"({self.cfg.connect_timeout_s:g} s)",
                unavailable=True,
            )
        if isinstance(exc, httpx.ConnectError):
            return self.fail(f"cannot reach the A2A agent at {where}: {exc or type(exc).__name__}", unavailable=True)
        return self.fail(f"the connection to the A2A agent at {where} failed: {exc or type(exc).__name__}", unavailable=True)

    async def request(self, call: HttpCall, *, timeout_s: float) -> bytes:
        """One call that is not streamed: the 2xx body, or a BackError (A2AError for the agent's own)."""
        assert self.wire is not None
        headers = {**call.headers, **self.headers(call.url)}
        try:
            with trio.fail_after(timeout_s):
                req = self.client.build_request(call.method, call.url, content=call.body, params=call.params, headers=headers)
                resp = await self.client.send(req, stream=True)
                try:
                    body = await _read_body(resp, self.cfg.max_event_bytes)
                finally:
                    await resp.aclose()
        except trio.TooSlowError:
            raise self.fail(
                f"the A2A agent at {_where(call.url)} did not answer {call.op} within {timeout_s:g} s", unavailable=True
            ) from None
        except _TooLarge as exc:
            raise self.fail(f"the A2A agent's answer to {call.op} exceeds max_event_bytes ({exc})") from None
        except httpx.TransportError as exc:
            raise self.transport_error(exc, call.url) from exc
        if resp.status_code >= 300:
            raise self.http_error(call, resp, body)
        return body

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
        """`doctor` and `/readyz`: the agent card is read (bridge/backs/a2a/probe.py)."""
        from bridge.backs.a2a.probe import probe_card

        return await probe_card(self)

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

    def _card_urls(self) -> list[str]:
        if self.cfg.card_url:
            return [self.cfg.card_url]
        assert self.cfg.url is not None
        base = self.cfg.url.rstrip("/")
        u = urlsplit(base)
        root = f"{u.scheme}://{u.netloc}{WELL_KNOWN}"
        first = base + WELL_KNOWN
        return [first] if first == root else [first, root]

    async def _fetch_card(self) -> None:
        urls = [self.cache.url] if self.cache.url else self._card_urls()
        last: BackError | None = None
        for url in urls:
            assert url is not None
            headers = {"Accept": "application/json", **self.cfg.headers, **self.cache.conditional_headers()}
            try:
                with trio.fail_after(self.cfg.connect_timeout_s + self.cfg.first_event_timeout_s):
                    resp = await self.client.get(url, headers=headers, follow_redirects=True)
            except trio.TooSlowError:
                raise self.fail(f"cannot read the agent card at {_where(url)}: no answer in time", unavailable=True) from None
            except httpx.TransportError as exc:
                err = self.transport_error(exc, url)
                raise type(err)(f"{err.message} (reading the agent card at {_where(url)})") from exc
            now = trio.current_time()
            if resp.status_code == 304 and self.cache.body is not None:
                self.cache.revalidated(resp.headers, now)
                return
            if resp.status_code == 404 and url != urls[-1]:
                continue
            if resp.status_code != 200:
                phrase = f"{resp.status_code} {httpx.codes.get_reason_phrase(resp.status_code)}".strip()
                last = self.fail(f"cannot read the agent card at {_where(url)}: it answered {phrase}", unavailable=resp.status_code >= 500)
                break
            body = resp.content
            try:
                view = parse_card(body, str(resp.url))
                iface = choose_interface(view, self.cfg.dialect, self.cfg.binding)
                placement = auth_placement(view, header_override=self.cfg.auth_header) if self._has_token() else None
            except CardError as exc:
                raise self.fail(f"cannot use the agent card at {_where(url)}: {exc}") from exc
            self.no_subscribe = False
            self.cache.stored(url, body, resp.headers, now)
            if self.wire is None or self.wire.iface != iface:
                self.wire = Wire(iface)
                log.info("route %s: A2A %s over %s at %s", self.name, iface.dialect.value, iface.binding.value, _where(iface.url))
            self.view, self._placement = view, placement
            r = self.route
            self.info = AgentInfo(
                name=view.name or self.name,
                title=r.title or view.name or None,
                version=view.version or r.version,
                description=r.description or view.description or None,
                commands=commands(view),
            )
            return
        raise last or self.fail("cannot find the agent card")

    def _has_token(self) -> bool:
        return bool(self.cfg.token_env or self.cfg.token_file)

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> Any:
        from bridge.backs.a2a.turn import A2ASession  # the turn logic needs this module first

        return A2ASession(self, ctx)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class _TooLarge(Exception):
    pass


async def _read_body(resp: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise _TooLarge(f"{size} > {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(chunks: Any) -> None:
    """Read what follows the last event (the agent closes the stream right after it), so
    the connection goes back to the pool instead of being torn down; give up quickly."""
    with trio.move_on_after(0.05):
        async for _ in chunks:
            pass


async def stream_events(
    back: A2ABack,
    call: HttpCall,
    on_event: Callable[[s.StreamResponse], bool],
    *,
    first_s: float,
    idle_s: float,
    flow: Callable[[], Awaitable[None]],
) -> bool:
    """Send a streaming call and hand every decoded StreamResponse to `on_event`, which
    returns True once the task is done. True if it was; False if the stream ended first.

    Deadlines are one cancel scope whose deadline moves: `first_s` until the first
    event, then `idle_s` after every read (heartbeat comments count as life). Raises
    `Broken` when resuming may help, `A2AError` for the agent's own error, BackError
    for the rest.
    """
    wire = back.wire
    assert wire is not None
    headers = {**call.headers, **back.headers(call.url)}
    seen_event = False
    try:
        with trio.CancelScope(deadline=trio.current_time() + first_s) as scope:
            req = back.client.build_request(call.method, call.url, content=call.body, params=call.params, headers=headers)
            resp = await back.client.send(req, stream=True)
            try:
                if resp.status_code >= 300:
                    body = await _read_body(resp, back.cfg.max_event_bytes)
                    raise back.http_error(call, resp, body)
                if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                    # An error (or a plain result) instead of a stream: a JSON body.
                    body = await _read_body(resp, back.cfg.max_event_bytes)
                    err = wire.decode_http_error(resp.status_code, body)
                    if err is not None:
                        raise err
                    result = wire.decode_send(body)
                    return on_event(s.StreamResponse(task=result) if isinstance(result, s.Task) else s.StreamResponse(message=result))
                decoder = SSEDecoder(back.cfg.max_event_bytes)
                chunks = resp.aiter_bytes()
                # Moving a deadline re-registers it with trio; doing so on every read cost
                # more than decoding the event. So the deadline moves only when less than
                # 90 % of the idle window is left: silence is caught after 0.9–1 × idle_s.
                slack = 0.1 * idle_s
                async for chunk in chunks:
                    if seen_event and scope.deadline - trio.current_time() < idle_s - slack:
                        scope.deadline = trio.current_time() + idle_s
                    for ev in decoder.feed(chunk):
                        if not seen_event:
                            seen_event = True
                            scope.deadline = trio.current_time() + idle_s
                        if on_event(wire.decode_event(ev.data)):
                            await _drain(chunks)
                            return True
                    # Time a slow editor holds us here (backpressure) is not agent silence.
                    paused = trio.current_time()
                    await flow()
                    if seen_event and trio.current_time() - paused > slack:
                        scope.deadline = trio.current_time() + idle_s
                decoder.feed_eof()
                return False
            finally:
                with trio.move_on_after(1, shield=True):
                    await resp.aclose()
    except httpx.TransportError as exc:
        raise Broken(f"the connection broke: {exc or type(exc).__name__}", back.transport_error(exc, call.url)) from exc
    except EventTooLarge as exc:
        raise back.fail(f"the A2A agent at {_where(call.url)} sent {exc}") from exc
    except InvalidResponse as exc:
        raise back.fail(f"the A2A agent at {_where(call.url)} sent {exc}") from exc
    if scope.cancelled_caught:
        if not seen_event:
            why = f"sent no event within first_event_timeout_s ({first_s:g} s)"
        else:
            why = f"sent nothing for idle_timeout_s ({idle_s:g} s)"
        raise Broken(f"the agent {why}", back.fail(f"the A2A agent at {_where(call.url)} {why}", unavailable=True))
    return False
