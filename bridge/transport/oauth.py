"""An OAuth 2 client for one back or prompt source: its access token, fetched once, shared, renewed.

`OAuthClient.token()` answers the cached token while it is fresh; when it is not, one
task asks the token endpoint and every other caller waits for that one answer (single
flight: a hundred turns starting together make one token request, and a failure
reaches them all at once instead of a hundred retries). A token is fresh until its
`expires_in` minus `expiry_margin_s` (at most half its life); then it is renewed with
its refresh token when the server gave one (RFC 6749 §6), else by the configured grant
again: client credentials (RFC 6749 §4.4) or token exchange (RFC 8693 §2.1). When the
agent answers 401 to a token, the caller calls `invalidate(token)` and asks again, once
(`bridge/backs/a2a/http.py`, `bridge/backs/chat/server.py`, `bridge/prompts/mcp_source.py`).

Bounds: each request `timeout_s`, at most `retries` more attempts for what may pass
(the endpoint unreachable, 5xx, 429), an answer of at most `max_response_bytes`. A
refusal (400/401: a wrong secret, an unknown client) is not retried: it is a
`BackError` naming the endpoint and the server's `error` code (RFC 6749 §5.2).

Hand-written rather than authlib: the flow is one form POST, and what matters here is
trio's single flight, our bounds and our error words, which a library's client would
have to be wrapped for anyway. Secrets (the client secret, the subject token, the
access and refresh tokens) never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import base64
import logging
import math
import ssl
from urllib.parse import quote, urlsplit

import httpx
import msgspec
import trio

from bridge.config import read_secret
from bridge.errors import BackError, BackUnavailable
from bridge.logs import add_secret
from bridge.transport.config import OAuthConfig
from bridge.transport.http import open_client, tls_context

__all__ = ["OAuthClient"]

log = logging.getLogger("bridge.transport.oauth")

_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693 §2.1
_MAX_LIFETIME_S = 366 * 86400.0


class _TokenResponse(msgspec.Struct):
    """RFC 6749 §5.1 (and RFC 8693 §2.2.1); unknown fields are ignored."""

    access_token: str
    token_type: str = "Bearer"
    expires_in: float | None = None
    refresh_token: str | None = None


class _ErrorResponse(msgspec.Struct):
    """RFC 6749 §5.2."""

    error: str = ""
    error_description: str | None = None


_decode_token = msgspec.json.Decoder(_TokenResponse)
_decode_error = msgspec.json.Decoder(_ErrorResponse)


class _Token:
    """A token and when to renew it; never shows its values."""

    __slots__ = ("renew_at", "value")

    def __init__(self, value: str, renew_at: float) -> None:
        self.value = value
        self.renew_at = renew_at

    def __repr__(self) -> str:
        return "_Token(***)"


class _Flight:
    """One token request in progress, and what it came to."""

    __slots__ = ("done", "error", "token")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BackError | None = None
        self.token: str | None = None


class _Retry(Exception):
    """A failed attempt worth another; `error` is reported if none is left."""

    def __init__(self, error: BackError) -> None:
        self.error = error


def _header_safe(value: str) -> bool:
    return bool(value) and value.isascii() and value.isprintable()


def _words(text: str | None, limit: int = 200) -> str:
    """A server's own words, bounded and printable, for an error message."""
    text = "".join(c for c in (text or "") if c.isprintable())
    return text if len(text) <= limit else text[:limit] + "…"


class OAuthClient:
    """The access token of one configured client (see the module docstring).

    `name` says whose token it is in every error ("route demo", "prompt source docs")."""

    def __init__(self, cfg: OAuthConfig, *, name: str) -> None:
        self.cfg = cfg
        self.name = name
        self._token: _Token | None = None
        self._refresh: str | None = None
        self._flight: _Flight | None = None
        self._http: httpx.AsyncClient | None = None
        u = urlsplit(cfg.token_url)
        # The token endpoint as every message names it: no query (a key may ride in it).
        self.where = f"{u.scheme}://{u.hostname or ''}{':' + str(u.port) if u.port else ''}{u.path}"
        self.requests = 0  # token requests sent (a metric, and what tests count)
        self._sent: set[str] = set()  # the secrets read for requests: kept out of what a server says back

    def __repr__(self) -> str:
        return f"OAuthClient({self.name!r}, token_url={self.where!r})"

    def _error(self, what: str, *, unavailable: bool = False) -> BackError:
        cls = BackUnavailable if unavailable else BackError
        return cls(f"{self.name}: {what}")

    # -- the token -----------------------------------------------------------------------------
    async def token(self) -> str:
        """A fresh access token (see the module docstring); BackError when none can be had."""
        while True:
            held = self._token
            if held is not None and trio.current_time() < held.renew_at:
                return held.value
            flight = self._flight
            if flight is None:
                return await self._lead()
            await flight.done.wait()
            if flight.error is not None:
                raise type(flight.error)(flight.error.message)
            if flight.token is not None:  # what it brought, even one already due (expires_in 0)
                return flight.token
            # Its leader was cancelled: look again (one of the waiters leads).

    def invalidate(self, value: str) -> None:
        """The agent refused `value` (HTTP 401): the next `token()` gets a new one. A token
        already replaced stays, so many turns refused at once renew it once."""
        if self._token is not None and self._token.value == value:
            self._token = None

    async def _lead(self) -> str:
        flight = self._flight = _Flight()
        try:
            token = await self._fetch()
            self._token, flight.token = token, token.value
        except BackError as exc:
            flight.error = exc
            raise
        finally:
            self._flight = None
            flight.done.set()
        return token.value

    async def _fetch(self) -> _Token:
        refresh = self._refresh
        if refresh is not None:
            form = {"grant_type": "refresh_token", "refresh_token": refresh}
            if self.cfg.scope:
                form["scope"] = self.cfg.scope
            try:
                return await self._request(form, "refresh_token")
            except BackError as exc:
                if isinstance(exc, BackUnavailable):
                    raise
                # Refused (expired, revoked: RFC 6749 §5.2 invalid_grant): a new grant instead.
                log.info("%s: the refresh token was refused; asking with %s again", self.name, self.cfg.grant)
                self._refresh = None
        return await self._request(self._grant_form(), self.cfg.grant)

    def _grant_form(self) -> dict[str, str]:
        cfg = self.cfg
        form: dict[str, str] = {}
        if cfg.grant == "client_credentials":
            form["grant_type"] = "client_credentials"
        else:
            subject = read_secret(cfg.subject_token_env, cfg.subject_token_file)
            if not subject:
                where = f"${cfg.subject_token_env}" if cfg.subject_token_env else cfg.subject_token_file
                raise self._error(f"no subject token for the token exchange in {where} (subject_token_env/subject_token_file)")
            add_secret(subject, rotating=True)  # read anew at each request: it may rotate often
            self._remember(subject)
            form.update(grant_type=_TOKEN_EXCHANGE, subject_token=subject.strip(), subject_token_type=cfg.subject_token_type)
            if cfg.requested_token_type:
                form["requested_token_type"] = cfg.requested_token_type
        for key in ("scope", "audience", "resource"):
            value = getattr(cfg, key)
            if value:
                form[key] = value
        return form

    def _client_auth(self, form: dict[str, str]) -> dict[str, str]:
        """The client's credentials (RFC 6749 §2.3.1): a Basic header, or in the form."""
        cfg = self.cfg
        if not cfg.client_id:
            return {}
        secret = None
        if cfg.client_secret_env or cfg.client_secret_file:
            secret = read_secret(cfg.client_secret_env, cfg.client_secret_file)
            if not secret:
                where = f"${cfg.client_secret_env}" if cfg.client_secret_env else cfg.client_secret_file
                raise self._error(f"the OAuth client secret in {where} is not set or empty")
            secret = secret.strip()
            add_secret(secret)
            self._remember(secret)
        if secret is None or cfg.client_auth == "post":
            form["client_id"] = cfg.client_id
            if secret is not None:
                form["client_secret"] = secret
            return {}
        # Both parts form-urlencoded before Basic (RFC 6749 §2.3.1).
        pair = f"{quote(cfg.client_id, safe='')}:{quote(secret, safe='')}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}

    def _remember(self, secret: str) -> None:
        if len(self._sent) >= 8:  # rotated many times: only the newest matter
            self._sent.clear()
        self._sent.add(secret.strip())

    def _clean(self, text: str) -> str:
        """A server's words with any secret we sent it blanked (an error that echoes the request)."""
        for secret in self._sent:
            if secret:
                text = text.replace(secret, "***")
        return text

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            verify: ssl.SSLContext | bool = True
            if self.cfg.ca_file:
                try:
                    verify = tls_context(self.cfg.ca_file)
                except OSError as exc:
                    raise self._error(f"cannot read the token endpoint's ca_file {self.cfg.ca_file}: {exc.strerror or exc}") from exc
            self._http = open_client(connect_timeout_s=self.cfg.timeout_s, verify=verify, max_connections=4)
        return self._http

    async def _request(self, form: dict[str, str], grant: str) -> _Token:
        delay = self.cfg.retry_backoff_s
        attempt = 0
        while True:
            body = dict(form)
            headers = {"Accept": "application/json", **self._client_auth(body)}
            try:
                return await self._attempt(body, headers, grant)
            except _Retry as retry:
                if attempt >= self.cfg.retries:
                    raise retry.error from None
                log.warning("%s; trying again in %g s", retry.error.message, delay)
            attempt += 1
            await trio.sleep(delay)
            delay *= 2

    async def _attempt(self, form: dict[str, str], headers: dict[str, str], grant: str) -> _Token:
        at = f"the token endpoint at {self.where}"
        self.requests += 1
        try:
            with trio.fail_after(self.cfg.timeout_s):
                resp = await self._client.send(
                    self._client.build_request("POST", self.cfg.token_url, data=form, headers=headers), stream=True
                )
                try:
                    body = b""
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) > self.cfg.max_response_bytes:
                            raise self._error(f"{at} answered more than max_response_bytes ({self.cfg.max_response_bytes})")
                finally:
                    await resp.aclose()
        except trio.TooSlowError:
            raise _Retry(self._error(f"{at} did not answer within timeout_s ({self.cfg.timeout_s:g} s)", unavailable=True)) from None
        except httpx.TransportError as exc:
            raise _Retry(self._error(f"cannot reach {at}: {type(exc).__name__}", unavailable=True)) from None
        except httpx.DecodingError:  # not a TransportError: a body its Content-Encoding does not decode
            raise self._error(f"{at} answered a body that does not decode as its Content-Encoding says") from None
        status = resp.status_code
        if status >= 500 or status == 429:
            raise _Retry(self._error(f"{at} answered HTTP {status}", unavailable=True))
        if status != 200:
            try:
                err = _decode_error.decode(body)
                # Blanked before cut: a secret cut in two would not be found, and half shown.
                said = _words(self._clean(err.error), 64) + (f": {_words(self._clean(err.error_description))}" if err.error_description else "")
            except (msgspec.DecodeError, msgspec.ValidationError):
                said = "no OAuth error in its answer"
            hint = " (check client_id and the client secret)" if status == 401 or "invalid_client" in said else ""
            raise self._error(f"{at} refused the {grant} grant: HTTP {status}, {said}{hint}")
        try:
            answer = _decode_token.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._error(f"{at} answered with no usable token ({_words(str(exc), 120)})") from None
        if answer.token_type.lower() != "bearer" or not _header_safe(answer.access_token):
            # RFC 6750: only bearer tokens go in an Authorization header as they are.
            raise self._error(f"{at} answered a token of type {_words(answer.token_type, 32)!r}, not a usable Bearer token")
        if answer.refresh_token is not None:
            self._refresh = answer.refresh_token
        life = answer.expires_in if answer.expires_in is not None and answer.expires_in >= 0 else self.cfg.default_lifetime_s
        life = min(life, _MAX_LIFETIME_S)
        margin = min(self.cfg.expiry_margin_s, life / 2)
        renew_at = trio.current_time() + life - margin if life > 0 else -math.inf
        log.info("%s: new access token from %s (%s, valid %g s)", self.name, self.where, grant, life)
        return _Token(answer.access_token, renew_at)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
