"""`GET /api/routes`: what a client needs to start and drive a session on each route.

    {"routes": [{name, back, description, default, commands: [{name, description, hint}],
                 options: [{id, name, current, values: [{value, name}]}],
                 health: {status: "ok" | "FAILED" | "not checked"}}],
     "prompt_sources": [{name, status}]}

`commands` are those a new session of the route offers (bridge/fronts/chat/views.py);
`options` the route's own with their defaults (an agent's own options come with a
session). `health` is the status of the daemon's readiness probes (`/readyz`), shared
with it and cached as long (`[daemon] probe_interval_s`): never a probe of its own per
call. Only the status: a probe's detail names URLs and paths, which only the admin
token may read on `/readyz`. Without the daemon's readiness (an app built without it),
every status is "not checked" and no prompt source is listed. With access rules, a
caller is shown only the routes it may use (bridge/fronts/owners.py `usable`).
"""

from __future__ import annotations

from typing import Any

from bridge.config import Config, Route
from bridge.core.identity import of_scope
from bridge.fronts import owners
from bridge.fronts.chat.views import SessionViews, back_kind, command_dicts
from bridge.fronts.http import Scope
from bridge.session import SessionManager

__all__ = ["RoutesApi", "default_route"]

_UNCHECKED = "not checked"


def default_route(config: Config) -> str | None:
    """The route a session gets when none is named: `default_route`, or the only one."""
    routes = config.routes
    return config.default_route or (next(iter(routes)) if len(routes) == 1 else None)


def _options(route: Route) -> list[dict[str, Any]]:
    return [
        {
            "id": o.id, "name": o.name, "current": o.default or o.values[0].value,
            "values": [{"value": v.value, "name": v.name} for v in o.values],
        }
        for o in route.options
    ]  # fmt: skip


class RoutesApi:
    """`readiness`: the daemon's `Readiness` (bridge/doctor.py), or None."""

    def __init__(self, manager: SessionManager, views: SessionViews, readiness: Any) -> None:
        self.manager = manager
        self.views = views
        self.readiness = readiness

    async def index(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        config = self.manager.config
        who = of_scope(scope)
        health: dict[str, str] = {}
        sources: list[dict[str, str]] = []
        if self.readiness is not None:
            health = {p.route: p.status for p in await self.readiness.probes()}
            sources = [{"name": p.route, "status": p.status} for p in self.readiness.sources()]
        default = default_route(config)
        routes = [
            {
                "name": name,
                "back": back_kind(self.manager, name),
                "description": route.description or route.title,
                "default": name == default,
                "commands": command_dicts(self.views.route_commands(name)),
                "options": _options(route),
                "health": {"status": health.get(name, _UNCHECKED)},
            }
            for name, route in config.routes.items()
            if owners.usable(config, who, name)
        ]
        return 200, {"routes": routes, "prompt_sources": sources}, []
