"""Who may use the chat front (`/ws` and `/api/sessions`): bearer token and Origin.

With `[[auth.issuers]]` an issuer's JWT is checked once for every HTTP front by
`HttpApp` (bridge/fronts/auth.py), and a `/ws` client that cannot send a header (a
browser) sends it as its first frame's `auth.token`, checked here with the same
`Authenticator`. The front's own static token, below, stays the simpler option.

The token comes from `[ws] token_env` or `token_file` (DESIGN.md complaint 4); it is
compared in constant time and never logged or echoed. Browsers always send
`Origin`, so a request whose Origin is not allowed is refused (cross-site WebSocket
hijacking); a request without Origin is not from a page and only needs the token.
Which origins are allowed is the listener's one policy (bridge/fronts/http_policy.py:
loopback, `[server] allowed_origins`), with `[ws] allowed_origins` added for this
front. `HttpApp` enforces it before any handler runs; this object answers only which
origins get CORS headers (`origin_listed`).
"""

from __future__ import annotations

import hmac
import logging

from bridge.config import ServerConfig
from bridge.core.identity import ANONYMOUS, SCOPE_KEY, Identity, of_scope
from bridge.fronts.auth import AuthRefused, Authenticator, static_identity
from bridge.fronts.chat.config import WsFrontConfig
from bridge.errors import AuthRequired
from bridge.fronts.http import Scope, header
from bridge.fronts.http_policy import BrowserPolicy, normalize_origins

__all__ = ["Access"]

log = logging.getLogger("bridge.fronts.chat")


class Access:
    __slots__ = ("_token", "_static", "_required", "_origins", "_policy", "auth")

    def __init__(self, cfg: WsFrontConfig, server: ServerConfig | None = None, auth: Authenticator | None = None) -> None:
        self._token = cfg.token()
        self._static = cfg.token_required
        self.auth = auth  # the issuers, when configured
        self._required = cfg.token_required or auth is not None
        if self._static and self._token is None:
            source = f"environment variable {cfg.token_env}" if cfg.token_env else f"file {cfg.token_file}"
            log.error("[ws] names a token but the %s gives none: every chat client is refused", source)
        self._origins = normalize_origins(cfg.allowed_origins)
        self._policy = BrowserPolicy(server if server is not None else ServerConfig())

    def __repr__(self) -> str:
        return f"Access(token={'<set>' if self._token else None}, origins={sorted(self._origins)})"

    @property
    def needs_token(self) -> bool:
        return self._required

    def static(self, params: dict[str, str]) -> bool:
        """Whether the front checks a static token of its own (`HttpApp.add(static=)`)."""
        return self._static

    def token_ok(self, token: str | None) -> bool:
        if not self._required:
            return True
        if not self._static or self._token is None or token is None:
            return False  # fail closed: a token is configured but could not be read
        return hmac.compare_digest(token.encode(), self._token.encode())

    async def identify_token(self, token: str | None) -> Identity | None:
        """Who a `/ws` first frame's `auth.token` names: an issuer's JWT or the static
        token; None if it names nobody."""
        if not self._required:
            return ANONYMOUS
        if token is not None and self.auth is not None and token.count(".") == 2:
            try:
                return await self.auth.verify(token)
            except AuthRefused as exc:
                log.warning("chat client's token refused: %s", exc.reason)
                return None
        return static_identity("ws") if self.token_ok(token) else None

    @property
    def origins(self) -> frozenset[str]:
        """`[ws] allowed_origins`: what this front accepts beside the listener's policy."""
        return self._origins

    def origin_listed(self, origin: str | None) -> bool:
        """Named by the operator, not merely loopback: only such a page gets CORS headers."""
        return origin is not None and self._policy.origin_listed(origin, self._origins)

    def check_bearer(self, scope: Scope) -> bool:
        """True if an Authorization header carried the right token; AuthRequired if a wrong one.

        False when there is no header (a WebSocket may still send `auth.token` first).
        """
        if of_scope(scope).via == "jwt":  # an issuer's token, checked by HttpApp
            return True
        value = header(scope, "authorization")
        if value is None:
            return not self.needs_token
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not self.token_ok(token.strip()):
            raise AuthRequired("invalid bearer token")
        if self._static:
            scope[SCOPE_KEY] = static_identity("ws")
        return True
