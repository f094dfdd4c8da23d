"""The HTTP side of one A2A back: the agent's client, its token, and failures in words.

`AgentHttp` is shared by the back (the agent card) and its sessions (turns). It owns
one pooled client (`bridge.transport.http.open_client`), sends the route's token
only to the origins it was configured for (DESIGN.md complaint 4), sends calls
that are not streamed (`request`), and words every failure as a `BackError` that
names the route and what failed, never a secret. The streamed calls are
`bridge.backs.a2a.stream`.

With `[routes.NAME.oauth]` the token is an OAuth access token (bridge/transport/oauth.py)
sent as `Authorization: Bearer` (RFC 6750 §2.1); a 401 to it renews it and the call is
sent once more. `forward_identity_header` names the turn's caller to the agent: the
caller is `CALLER`, set by the session's turn (bridge/backs/a2a/turn.py) for every call
made on its behalf.
"""

from __future__ import annotations

import contextvars
import ssl
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

import httpx
import trio

from bridge.backs.secrets import Secret, read_token
from bridge.codecs.a2a_card import AuthPlacement
from bridge.codecs.a2a_client import HttpCall, Wire
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import BackError, BackUnavailable
from bridge.transport.http import open_client, tls_context
from bridge.transport.oauth import OAuthClient

if TYPE_CHECKING:
    from bridge.backs.a2a.config import A2ABackConfig as A2AConfig
    from bridge.config import Route

__all__ = ["CALLER", "AgentHttp", "BodyTooLarge", "origin", "read_body", "where"]

# Whose turn a call serves (bridge/core/identity.py): set by `A2ASession` in the turn's
# task (and its cancel's), read by `AgentHttp.auth` for `forward_identity_header`.
CALLER: contextvars.ContextVar[Identity] = contextvars.ContextVar("agent_bridge_a2a_caller", default=ANONYMOUS)


def origin(url: str) -> str:
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return f"{u.scheme}://{(u.hostname or '').lower()}:{port}"


def where(url: str) -> str:
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


class BodyTooLarge(Exception):
    """A reply body over `max_event_bytes`."""


async def read_body(resp: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"{size} > {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class AgentHttp:
    """The route's HTTP link to its A2A agent (see the module docstring).

    `wire` and `placement` are the agent card's choices (the interface to call and
    where the token goes), set by the back whenever it reads the card."""

    def __init__(self, name: str, route: Route) -> None:
        self.name = name
        self.route = route
        self.cfg: A2AConfig = route.back  # type: ignore[assignment]
        self.wire: Wire | None = None
        self.placement: AuthPlacement | None = None
        self.no_subscribe = False  # the agent cannot re-attach to a stream: poll instead
        self._client: httpx.AsyncClient | None = None
        self.oauth = OAuthClient(route.oauth, name=f"route {name}") if route.oauth is not None else None
        base = self.cfg.card_url or self.cfg.url or ""
        self._origins = {origin(base)} | {origin(o) for o in self.cfg.auth_origins}

    def error(self, what: str, *, unavailable: bool = False) -> BackError:
        """The error to raise for `what` (BackUnavailable when trying again may help)."""
        cls = BackUnavailable if unavailable else BackError
        return cls(f"route {self.name}: {what}")

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            cfg = self.cfg
            verify: ssl.SSLContext | bool = True
            if cfg.ca_file:
                try:
                    verify = tls_context(cfg.ca_file)
                except OSError as exc:
                    raise self.error(f"cannot read ca_file {cfg.ca_file}: {exc.strerror or exc}") from exc
            self._client = open_client(connect_timeout_s=cfg.connect_timeout_s, verify=verify, max_connections=cfg.max_connections)
        return self._client

    def has_token(self) -> bool:
        return bool(self.cfg.token_env or self.cfg.token_file or self.oauth)

    async def auth(self, url: str) -> tuple[dict[str, str], str | None]:
        """`headers(url)`, plus the OAuth token (and which one, for `unauthorized`) and the
        caller's subject in `forward_identity_header`."""
        out = self.headers(url)
        oauth = self.oauth
        if oauth is None:
            return out, None
        self._check_origin(url)
        token = await oauth.token()
        out["Authorization"] = f"Bearer {token}"
        forward = oauth.cfg.forward_identity_header
        caller = CALLER.get()
        if forward and not caller.anonymous:
            # A subject is any string: percent-encoded unless a header carries it as it is.
            subject = caller.subject
            out[forward] = subject if subject.isascii() and subject.isprintable() else quote(subject, safe="")
        return out, token

    def unauthorized(self, status: int, token: str | None) -> bool:
        """A 401 to an OAuth token: forget it (the next `auth` gets a new one); True if
        the call is worth sending once more."""
        if status != 401 or token is None or self.oauth is None:
            return False
        self.oauth.invalidate(token)
        return True

    def _check_origin(self, url: str) -> None:
        if origin(url) not in self._origins:
            raise self.error(
                f"the agent card sends calls to {origin(url)}, not the configured origin; agent-bridge does not send "
                "the route's token there (add that origin to auth_origins if it is meant to have it)"
            )

    def _token(self) -> Secret | None:
        """The token, read now (rotation needs no restart); never in a message."""
        return read_token(self.cfg.token_env, self.cfg.token_file, self.error)

    def headers(self, url: str) -> dict[str, str]:
        """Configured headers plus the token, for a call to `url` (only to our origins)."""
        out = dict(self.cfg.headers)
        token = self._token()
        if token is None:
            return out
        self._check_origin(url)
        assert self.placement is not None
        out[self.placement.header] = self.placement.prefix + token.reveal()
        return out

    def _auth_hint(self) -> str:
        if self.oauth is not None:
            return f"the OAuth token from {self.oauth.where} was refused, also after renewing it"
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
        at = f"the A2A agent at {where(call.url)}"
        if status in (401, 403):
            return self.error(f"{at} answered {phrase} ({self._auth_hint()}){detail}")
        if status == 429:
            # Reported, not retried: a plain BackError, which no resume loop retries.
            after = resp.headers.get("retry-after")
            wait = f", retry after {after} s" if after else ""
            return self.error(f"{at} answered {phrase}{wait}; not retried{detail}")
        if status == 404:
            return self.error(f"{at} answered {phrase} to {call.method} (is the url right?){detail}")
        return self.error(f"{at} answered {phrase}{detail}", unavailable=status >= 500)

    def transport_error(self, exc: Exception, url: str) -> BackError:
        at = origin(url)
        tls = _ssl_reason(exc)
        if tls is not None:
            hint = "" if self.cfg.ca_file else "; if it uses a private CA, set ca_file"
            return self.error(f"TLS with the A2A agent at {at} failed: {tls}{hint}", unavailable=True)
        if isinstance(exc, httpx.ConnectTimeout):
            return self.error(
                f"cannot reach the A2A agent at {at}: no connection within connect_timeout_s "
                f"({self.cfg.connect_timeout_s:g} s)",
                unavailable=True,
            )
        if isinstance(exc, httpx.ConnectError):
            return self.error(f"cannot reach the A2A agent at {at}: {exc or type(exc).__name__}", unavailable=True)
        return self.error(f"the connection to the A2A agent at {at} failed: {exc or type(exc).__name__}", unavailable=True)

    async def request(self, call: HttpCall, *, timeout_s: float) -> bytes:
        """One call that is not streamed: the 2xx body, or a BackError (A2AError for the agent's own)."""
        try:
            with trio.fail_after(timeout_s):
                for _ in range(2):  # a 401 to an OAuth token: once more with a new one
                    auth, token = await self.auth(call.url)
                    req = self.client.build_request(call.method, call.url, content=call.body, params=call.params, headers={**call.headers, **auth})
                    resp = await self.client.send(req, stream=True)
                    try:
                        body = await read_body(resp, self.cfg.max_event_bytes)
                    finally:
                        await resp.aclose()
                    if not self.unauthorized(resp.status_code, token):
                        break
        except trio.TooSlowError:
            raise self.error(f"the A2A agent at {where(call.url)} did not answer {call.op} within {timeout_s:g} s", unavailable=True) from None
        except BodyTooLarge as exc:
            raise self.error(f"the A2A agent's answer to {call.op} exceeds max_event_bytes ({exc})") from None
        except httpx.TransportError as exc:
            raise self.transport_error(exc, call.url) from exc
        if resp.status_code >= 300:
            raise self.http_error(call, resp, body)
        return body

    async def aclose(self) -> None:
        if self.oauth is not None:
            await self.oauth.aclose()
        if self._client is not None:
            await self._client.aclose()
