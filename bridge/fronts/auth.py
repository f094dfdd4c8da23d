"""Who is calling: the one authentication step of every HTTP front.

`HttpApp` (bridge/fronts/http.py) asks `Authenticator.identify` on every request and
WebSocket upgrade of a path that is not public, before its handler. With no
`[[auth.issuers]]` there is no `Authenticator` and each front's static token works as
it always did. With issuers:

- a bearer token shaped as a JWT (RFC 7519 §3: three base64url parts) is checked here,
  against the issuer its `iss` names: signature with that issuer's key (bridge/fronts/jwks.py),
  one of the issuer's algorithms (never `none`, never HMAC), `exp` (required), `nbf`,
  `iat`, `iss`, `aud` (RFC 9068 §4, with the issuer's clock skew) and `sub` (required).
  A valid one puts `Identity(via="jwt")` in the ASGI scope (bridge/core/identity.py);
  an invalid one is refused with 401 and `WWW-Authenticate: Bearer error="invalid_token"`
  (RFC 6750 §3.1), whatever the front;
- any other credential is left to the front's static token (`[ws] token_env`, an A2A
  route's `token_env`, `[mcp] token_env`), which then sets `Identity(via="token")`;
- a request with neither, on a path whose front has no static token, is refused 401.

The challenge names the RFC 9728 protected-resource metadata (`resource_metadata`), as
MCP 2025-11-25 Authorization ("Protected Resource Metadata Discovery") asks, so a
client can find the issuer by itself.

Verified tokens are remembered until they expire (`[auth] token_cache` of them), so a
client reusing its token pays a dict lookup; the first use of a token costs one
signature check (bench/a2a_front.py --issuer).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import jwt
import trio

from bridge.config import AuthConfig, IssuerConfig
from bridge.core.identity import Identity
from bridge.fronts.jwks import IssuerKeys
from bridge.transport.http import open_client

__all__ = ["MAX_TOKEN_BYTES", "AuthRefused", "Authenticator", "bearer_of", "metadata_url", "public_base", "static_identity"]

log = logging.getLogger("bridge.fronts.auth")

MAX_TOKEN_BYTES = 16 * 1024
_REQUIRED = ["exp", "iss", "aud", "sub"]


class AuthRefused(Exception):
    """A credential that does not let the caller in (401). `reason` is safe to show."""

    def __init__(self, reason: str, *, shaped: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.shaped = shaped  # False: not even a JWT's header (maybe a static token with two dots)


def bearer_of(scope: dict[str, Any]) -> str | None:
    """The token of an `Authorization: Bearer` header (RFC 6750 §2.1), else None."""
    for k, v in scope.get("headers", ()):
        if k == b"authorization":
            scheme, _, token = v.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def static_identity(front: str) -> Identity:
    """Who holds a front's static token: one caller per token."""
    return Identity(subject=front, via="token")


def public_base(scope: dict[str, Any], configured: str | None) -> str:
    """This bridge's base URL as the client reached it (`[auth] resource_url` if set).
    The Host was checked by the browser policy before we get here."""
    if configured:
        return configured.rstrip("/")
    host = "localhost"
    for k, v in scope.get("headers", ()):
        if k == b"host":
            host = v.decode("latin-1")
            break
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    return f"{scheme}://{host}"


def metadata_url(scope: dict[str, Any], configured: str | None, resource_path: str = "") -> str:
    """RFC 9728 §3.1: the well-known URL is built by inserting the well-known part before the path."""
    return f"{public_base(scope, configured)}/.well-known/oauth-protected-resource{resource_path}"


class Authenticator:
    """The issuers' tokens, checked; see the module docstring."""

    def __init__(self, cfg: AuthConfig) -> None:
        self.cfg = cfg
        self.issuers = {i.issuer: IssuerKeys(i, cfg, self._fetch) for i in cfg.issuers}
        self._only = next(iter(self.issuers.values())) if len(self.issuers) == 1 else None
        self._seen: dict[str, tuple[Identity, float]] = {}

    def __repr__(self) -> str:
        return f"Authenticator(issuers={list(self.issuers)})"

    @property
    def enabled(self) -> bool:
        return bool(self.issuers)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beside the listener: fetch every issuer's keys once at start (a failure is
        logged and retried by the first request that needs them)."""
        task_status.started()
        async with trio.open_nursery() as nursery:
            for keys in self.issuers.values():
                nursery.start_soon(keys.refresh)

    async def _fetch(self, url: str) -> bytes:
        """GET `url`, at most `jwks_max_bytes` (rare: bounded per issuer by the refresh interval)."""
        limit = self.cfg.jwks_max_bytes
        try:
            async with open_client(connect_timeout_s=self.cfg.jwks_timeout_s, timeout_s=self.cfg.jwks_timeout_s) as client:
                async with client.stream("GET", url, headers={"accept": "application/json"}) as response:
                    if response.status_code != 200:
                        raise OSError(f"{url} answered {response.status_code}")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > limit:
                            raise OSError(f"{url} sent more than jwks_max_bytes ({limit})")
                    return bytes(body)
        except Exception as exc:  # httpx's own errors, TLS, a bad URL: one failed fetch, said in the log
            if isinstance(exc, OSError):
                raise
            raise OSError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def identify(self, scope: dict[str, Any]) -> Identity | None:
        """The caller of this request when it carries an issuer's JWT; None when it carries
        no JWT (the front's static token, if any, decides). AuthRefused for a bad JWT."""
        token = bearer_of(scope)
        if token is None or token.count(".") != 2:
            return None
        return await self.verify(token)

    async def verify(self, token: str) -> Identity:
        """The identity a JWT proves; AuthRefused (reason safe to show) otherwise. Total."""
        now = time.time()
        seen = self._seen.get(token)
        if seen is not None:
            if now <= seen[1]:
                return seen[0]
            del self._seen[token]
        if len(token) > MAX_TOKEN_BYTES or token.count(".") != 2:
            raise AuthRefused("the bearer token is not a JWT", shaped=False)
        try:
            head = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise AuthRefused(f"the bearer token is not a JWT: {exc}", shaped=False) from exc
        alg, kid = head.get("alg"), head.get("kid")
        if not isinstance(alg, str) or not (kid is None or isinstance(kid, str)):
            raise AuthRefused("the token's header has no usable alg or kid")
        keys = self._only or self._issuer_of(token)
        issuer = keys.cfg
        if alg not in issuer.algorithms:
            raise AuthRefused(f"algorithm {alg[:16]!r} is not accepted from this issuer")
        key = await keys.key(kid, alg)
        if key is None:
            raise AuthRefused("the token is signed with a key its issuer does not publish")
        claims = _decode(token, key, alg, issuer)
        expires = float(claims["exp"]) + issuer.clock_skew_s
        identity = Identity(subject=claims["sub"], via="jwt", issuer=issuer.issuer, claims=claims, expires_at=expires)
        if self.cfg.token_cache:
            if len(self._seen) >= self.cfg.token_cache:
                self._seen.clear()
            self._seen[token] = (identity, expires)
        return identity

    def _issuer_of(self, token: str) -> IssuerKeys:
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise AuthRefused(f"the bearer token is not a JWT: {exc}") from exc
        iss = unverified.get("iss")
        keys = self.issuers.get(iss) if isinstance(iss, str) else None
        if keys is None:
            raise AuthRefused("the token's issuer is not one this bridge trusts")
        return keys

    def challenge(self, scope: dict[str, Any], reason: str | None = None, *, resource_path: str = "") -> str:
        """`WWW-Authenticate` for a 401 (RFC 6750 §3, RFC 9728 §5.1)."""
        parts = [f'resource_metadata="{_quoted(metadata_url(scope, self.cfg.resource_url, resource_path))}"']
        if reason is not None:
            parts += ['error="invalid_token"', f'error_description="{_quoted(reason)}"']
        return "Bearer " + ", ".join(parts)


def _decode(token: str, key: jwt.PyJWK, alg: str, issuer: IssuerConfig) -> dict[str, Any]:
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=issuer.audience,
            issuer=issuer.issuer,
            leeway=issuer.clock_skew_s,
            options={"require": _REQUIRED},
        )
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise AuthRefused(f"the token is not valid: {exc}") from exc
    sub, exp = claims.get("sub"), claims.get("exp")
    if not isinstance(sub, str) or not sub or len(sub) > 1024 or not isinstance(exp, int | float):
        raise AuthRefused("the token's sub or exp is not usable")
    return claims


def _quoted(text: str) -> str:
    """A quoted-string's content (RFC 9110 §5.6.4) with nothing that could break the header."""
    return "".join(c for c in text if c not in '"\\' and 0x20 <= ord(c) < 0x7F)[:300]
