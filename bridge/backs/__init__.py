"""Backs: what runs a turn. One package per kind, each declaring a `BackKind`
(bridge/registry.py); `make_back` builds a route's back through it."""

from __future__ import annotations

from bridge.backs.base import AgentInfo, Back, BackSession
from bridge.config import Route
from bridge.registry import back_kind_of

__all__ = ["AgentInfo", "Back", "BackSession", "make_back"]


def make_back(name: str, route: Route) -> Back:
    """The back for a route. Its kind's factory imports only that kind's code."""
    back: Back = back_kind_of(route.back).factory(name, route)
    return back
