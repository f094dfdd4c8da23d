"""Who may use the chat front (`/ws` and `/api/sessions`): bearer token and Origin.

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
from bridge.fronts.chat.config import WsFrontConfig
from bridge.errors import AuthRequired
from bridge.fronts.http import Scope, header
from bridge.fronts.http_policy import BrowserPolicy, normalize_origins

__all__ = ["Access"]

log = logging.getLogger("bridge.fronts.chat")


class Access:
    __slots__ = ("_token", "_required", "_origins", "_policy")

    def __init__(self, cfg: WsFrontConfig, server: ServerConfig | None = None) -> None:
        self._token = cfg.token()
        self._required = cfg.token_required
        if self._required and self._token is None:
            source = f"environment variable {cfg.token_env}" if cfg.token_env else f"file {cfg.token_file}"
            log.error("[ws] names a token but the %s gives none: every chat client is refused", source)
        self._origins = normalize_origins(cfg.allowed_origins)
        self._policy = BrowserPolicy(server if server is not None else ServerConfig())

    def __repr__(self) -> str:
        return f"Access(token={'<set>' if self._token else None}, origins={sorted(self._origins)})"

    @property
    def needs_token(self) -> bool:
        return self._required

    def token_ok(self, token: str | None) -> bool:
        if not self._required:
            return True
        if self._token is None or token is None:
            return False  # fail closed: a token is configured but could not be read
        return hmac.compare_digest(token.encode(), self._token.encode())

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
        value = header(scope, "authorization")
        if value is None:
            return not self.needs_token
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not self.token_ok(token.strip()):
            raise AuthRequired("invalid bearer token")
        return True
