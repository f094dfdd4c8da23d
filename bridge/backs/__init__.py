"""Backs: what runs a turn. One module per kind; `make_back` picks by config."""

from __future__ import annotations

from bridge.backs.base import AgentInfo, Back, BackSession
from bridge.config import Route

__all__ = ["AgentInfo", "Back", "BackSession", "make_back"]


def make_back(name: str, route: Route) -> Back:
    """The back for a route. Imports are local so a route loads only what it uses."""
    kind = route.back.__struct_config__.tag
    if kind == "demo":
        from bridge.backs.demo.back import DemoBack

        return DemoBack(name, route)
    if kind == "acp":
        from bridge.backs.acp.back import AcpBack

        return AcpBack(name, route)
    if kind == "a2a":
        from bridge.backs.a2a.back import A2ABack

        return A2ABack(name, route)
    if kind == "chat":
        from bridge.backs.chat.back import ChatBack

        return ChatBack(name, route)
    raise ValueError(f"unknown back kind {kind!r}")  # config validation makes this unreachable
