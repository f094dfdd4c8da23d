"""An issuer's signing keys: its JWK Set, fetched, cached, and fetched again when it rotates.

One `IssuerKeys` per `[[auth.issuers]]`. Its keys come from `jwks_url`, or from the
`jwks_uri` of the issuer's OpenID Connect discovery document (OIDC Discovery 1.0 §4)
when no `jwks_url` is set. They are kept until `jwks_max_age_s`, then fetched again on
the next request that needs them (the old ones still serve if that fetch fails).

Rotation: a token naming a `kid` we do not know fetches the set again, but at most once
per `jwks_refresh_min_s` (RFC 7517 §4.5 lets an issuer add keys at any time). A flood of
tokens with made-up kids therefore costs one fetch per interval, not one per token;
requests arriving while a fetch is under way wait for that one fetch (bounded by
`jwks_timeout_s`) instead of starting their own.

Only asymmetric signing keys are kept: a JWK of `kty` "oct" (an HMAC secret) or with
`use` other than "sig" is dropped (RFC 7517 §4.2), so no token can be checked with an
HMAC over a public key. Every document is bounded (`jwks_max_bytes`, at most
`MAX_KEYS` keys). Fetches are httpx on trio: they never block the event loop.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import jwt
import msgspec
import trio

from bridge.config import AuthConfig, IssuerConfig

__all__ = ["MAX_KEYS", "Fetch", "IssuerKeys", "KeyProblem"]

log = logging.getLogger("bridge.fronts.auth")

MAX_KEYS = 64
# GET url -> its body (raises OSError/ValueError-family on failure; bounded by the caller).
Fetch = Callable[[str], Awaitable[bytes]]
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class KeyProblem(Exception):
    """The issuer's keys could not be read (said in the log, never to the client)."""


class IssuerKeys:
    __slots__ = ("cfg", "_auth", "_fetch", "_jwks_url", "_keys", "_single", "_prepared", "_fetched_at", "_tried_at", "_lock")

    def __init__(self, cfg: IssuerConfig, auth: AuthConfig, fetch: Fetch) -> None:
        self.cfg, self._auth, self._fetch = cfg, auth, fetch
        self._jwks_url = cfg.jwks_url
        self._keys: dict[str, dict[str, Any]] = {}  # by kid
        self._single: dict[str, Any] | None = None  # the set's one key, for tokens without a kid
        self._prepared: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self._fetched_at = -math.inf
        self._tried_at = -math.inf
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"IssuerKeys({self.cfg.issuer!r}, kids={sorted(self._keys)})"

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The key that checks a token with this `kid` and `alg`; None when the issuer has
        none (after at most one bounded refresh)."""
        now = time.monotonic()
        jwk = self._find(kid)
        if jwk is None or now - self._fetched_at > self._auth.jwks_max_age_s:
            await self.refresh()
            jwk = self._find(kid)
        if jwk is None:
            return None
        return self._prepare(kid, jwk, alg)

    def _find(self, kid: str | None) -> dict[str, Any] | None:
        return self._single if kid is None else self._keys.get(kid)

    def _prepare(self, kid: str | None, jwk: dict[str, Any], alg: str) -> jwt.PyJWK | None:
        found = self._prepared.get((kid, alg))
        if found is None:
            declared = jwk.get("alg")
            if declared is not None and declared != alg:
                return None  # RFC 7517 §4.4: the key is for another algorithm
            try:
                # Bound to `alg`: PyJWT then verifies with that algorithm only.
                found = jwt.PyJWK(jwk, algorithm=alg)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                return None  # e.g. an EC key named by an RS256 token
            if len(self._prepared) >= 4 * MAX_KEYS:
                self._prepared.clear()
            self._prepared[(kid, alg)] = found
        return found

    async def refresh(self) -> None:
        """Fetch the set again unless one was tried within `jwks_refresh_min_s`; wait for
        a fetch under way instead of starting another."""
        async with self._lock:  # a caller that waited here finds the fetch just made
            if time.monotonic() - self._tried_at < self._auth.jwks_refresh_min_s:
                return
            self._tried_at = time.monotonic()
            try:
                with trio.fail_after(self._auth.jwks_timeout_s):
                    keys = await self._load()
            except (KeyProblem, trio.TooSlowError, OSError) as exc:
                what = "timed out" if isinstance(exc, trio.TooSlowError) else str(exc)
                log.warning("issuer %s: its keys could not be fetched (%s); keeping %d known", self.cfg.issuer, what, len(self._keys))
                return
            self._keys = {k["kid"]: k for k in keys if isinstance(k.get("kid"), str)}
            self._single = keys[0] if len(keys) == 1 else None
            self._prepared.clear()
            self._fetched_at = time.monotonic()
            log.info("issuer %s: %d signing keys (%s)", self.cfg.issuer, len(keys), ", ".join(sorted(self._keys)))

    async def _load(self) -> list[dict[str, Any]]:
        if self._jwks_url is None:
            doc = await self._json(self.cfg.discovery_url)
            # OIDC Discovery 1.0 §4.3: the document's issuer must be the one we asked.
            if not isinstance(doc, dict) or doc.get("issuer") != self.cfg.issuer:
                raise KeyProblem("its discovery document names another issuer")
            url = doc.get("jwks_uri")
            if not isinstance(url, str) or not _url_ok(url):
                raise KeyProblem("its discovery document has no https jwks_uri")
            self._jwks_url = url
        doc = await self._json(self._jwks_url)
        raw = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(raw, list):
            raise KeyProblem("its JWK Set has no `keys` list")
        keys = [k for k in raw[: MAX_KEYS * 4] if _usable(k)][:MAX_KEYS]
        if not keys:
            raise KeyProblem("its JWK Set holds no public signing key")
        return keys

    async def _json(self, url: str) -> Any:
        body = await self._fetch(url)
        try:
            return msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise KeyProblem(f"{url} did not answer JSON") from exc


def _url_ok(url: str) -> bool:
    """https, or plain http to this machine only (as `[[auth.issuers]]` URLs are checked)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    return bool(host) and (parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK))


def _usable(key: Any) -> bool:
    """An asymmetric signing key (never an "oct" secret, never one for encryption)."""
    if not isinstance(key, dict) or key.get("kty") not in ("RSA", "EC", "OKP"):
        return False
    if "d" in key:  # a private key published by mistake: refuse to rely on that issuer's care
        return False
    use = key.get("use")
    ops = key.get("key_ops")
    return (use is None or use == "sig") and (ops is None or (isinstance(ops, list) and "verify" in ops))
