"""The daemon's operational HTTP endpoints: `/readyz` and `/metrics` (`/healthz` is in
bridge/daemon.py: alive is alive).

- `GET /readyz`: 200 when every listener is bound, the store is open (and a
  PostgreSQL store answers a ping, bounded by `[daemon] probe_timeout_s`, at most one
  a second) and the daemon takes new sessions (not stopping); 503 otherwise, with
  the reason in words that name nothing (starting, stopping, the store does not answer). The body says each part, and for
  each route whether its back is reachable (bridge/doctor.py, shallow probes, cached
  `[daemon] probe_interval_s`), and each MCP prompt source as the daemon's connection
  to it is now. An unreachable back or source does not make the daemon unready: the
  other routes still serve.
- `GET /metrics`: Prometheus text format, or OpenMetrics (with exemplars) when `Accept`
  asks for it (bridge/metrics.py).

Who sees what (issue 13, finding 11): the details of /readyz name routes, back URLs,
agent command paths and prompt sources, so anyone gets only `{"status": "ready"}` or
`{"status": "not ready", "reason": ...}` (and the status code); the details need
`Authorization: Bearer <[server] admin token>`, compared in constant time. With
`[server] metrics_need_token`, /metrics needs the same token. A token that is
configured but cannot be read refuses everyone (fail closed). The public answer runs
no probe, so an anonymous client cannot make the daemon call its backs (the store's
ping, shared, runs at most once a second whoever asks).

`CountConnections` wraps the ASGI app to count open WebSocket connections and HTTP
requests in flight; it passes `send` through untouched (the chat front finds
hypercorn's stream behind it).
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from bridge.fronts.http import HttpApp, Scope, header, send_bytes, send_json

__all__ = ["AdminToken", "CountConnections", "register"]

log = logging.getLogger("bridge.health")

_CHALLENGE = [("www-authenticate", 'Bearer realm="agent-bridge admin"')]


class AdminToken:
    """`[server] admin_token_env`/`admin_token_file`, read once at start-up."""

    __slots__ = ("_token", "configured")

    def __init__(self, token: str | None, *, configured: bool) -> None:
        self._token, self.configured = token, configured
        if configured and token is None:
            log.error("[server] names an admin token but it cannot be read: /readyz details are refused to everyone")

    def __repr__(self) -> str:
        return f"AdminToken({'<set>' if self._token else None})"

    def check(self, scope: Scope) -> bool | None:
        """True: the right token; False: a wrong one (or none can be read); None: no Authorization."""
        value = header(scope, "authorization")
        if value is None:
            return None
        scheme, _, given = value.partition(" ")
        if self._token is None or scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self._token.encode())


def register(
    app: HttpApp, *, readiness: Any = None, metrics: Any = None, admin: AdminToken | None = None, metrics_need_token: bool = False
) -> None:
    admin = admin if admin is not None else AdminToken(None, configured=False)
    if readiness is not None:

        async def readyz(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
            authed = admin.check(scope)
            if authed is False:
                await send_json(send, 401, {"detail": "invalid admin token"}, headers=_CHALLENGE)
                return
            if authed:
                ready, body = await readiness.report()
            else:  # the same rule as Readiness.report, without its probes or names
                ready, why = await readiness.ready()
                body = {"status": "ready" if ready else "not ready"}
                if why is not None:
                    body["reason"] = why
            await send_json(send, 200 if ready else 503, body)

        app.add("GET", "/readyz", readyz, public=True)  # details: the operators' token
    if metrics is not None:
        from bridge.metrics import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE, wants_openmetrics

        async def metrics_page(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
            if metrics_need_token and not admin.check(scope):
                await send_json(send, 401, {"detail": "/metrics needs the admin token ([server] metrics_need_token)"}, headers=_CHALLENGE)
                return
            # Exemplars (trace ids) exist only in OpenMetrics: served when the scraper asks for it.
            om = wants_openmetrics(header(scope, "accept") or "")
            page = metrics.render(openmetrics_format=om)
            await send_bytes(send, 200, page, content_type=OPENMETRICS_CONTENT_TYPE if om else CONTENT_TYPE)

        app.add("GET", "/metrics", metrics_page, public=True)  # metrics_need_token: the operators' token


class CountConnections:
    def __init__(self, app: Any, metrics: Any) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        front = {"http": "http", "websocket": "ws"}.get(scope["type"])
        if front is None:
            await self.app(scope, receive, send)
            return
        self.metrics.connection_opened(front)
        try:
            await self.app(scope, receive, send)
        finally:
            self.metrics.connection_closed(front)
