"""A2A front: every route as an A2A server at /a2a/{route} (1.0 and 0.3)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from bridge.fronts.a2a.config import A2AFrontConfig, A2ARouteConfig
from bridge.registry import FrontKind, SecretRefs

if TYPE_CHECKING:
    from bridge.config import Config
    from bridge.fronts.http import HttpApp
    from bridge.session import SessionManager

__all__ = ["FRONT"]


def _register(app: HttpApp, config: Config, manager: SessionManager) -> None:
    # A2A spec §9 (JSON-RPC) and §11 (HTTP+JSON), SSE streaming, the agent card (§8).
    from bridge.fronts.a2a import front

    front.register(app, config, manager)


def _check(section: A2AFrontConfig, routes: Collection[str]) -> list[str]:
    if section.default_route is not None and section.default_route not in routes:
        return [f"$.a2a.default_route: no route named {section.default_route!r}"]
    return []


def _route_secrets(route: A2ARouteConfig) -> SecretRefs:
    # The token an A2A client must send to this route (`token_env` / `token_file`).
    return SecretRefs(envs=(route.token_env,) if route.token_env else (), files=(route.token_file,) if route.token_file else ())


FRONT = FrontKind(
    name="a2a", config=A2AFrontConfig, register=_register, route_config=A2ARouteConfig, route_secrets=_route_secrets, check=_check
)
