"""The daemon's operational HTTP endpoints: `/readyz` and `/metrics` (`/healthz` is in
bridge/daemon.py: alive is alive).

- `GET /readyz`: 200 when every listener is bound, the store is open and the daemon
  takes new sessions (not stopping); 503 otherwise. The body says each part, and for
  each route whether its back is reachable (bridge/doctor.py, shallow probes, cached
  `[daemon] probe_interval_s`), and each MCP prompt source as the daemon's connection
  to it is now. An unreachable back or source does not make the daemon unready: the
  other routes still serve.
- `GET /metrics`: Prometheus text format (bridge/metrics.py).

`CountConnections` wraps the ASGI app to count open WebSocket connections and HTTP
requests in flight; it passes `send` through untouched (the chat front finds
hypercorn's stream behind it).
"""

from __future__ import annotations

from typing import Any

from bridge.fronts.http import HttpApp, send_bytes, send_json

__all__ = ["CountConnections", "register"]


def register(app: HttpApp, *, readiness: Any = None, metrics: Any = None) -> None:
    if readiness is not None:

        async def readyz(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
            ready, body = await readiness.report()
            await send_json(send, 200 if ready else 503, body)

        app.add("GET", "/readyz", readyz)
    if metrics is not None:
        from bridge.metrics import CONTENT_TYPE

        async def metrics_page(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
            await send_bytes(send, 200, metrics.render(), content_type=CONTENT_TYPE)

        app.add("GET", "/metrics", metrics_page)


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
