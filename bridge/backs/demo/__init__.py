"""Demo back: the built-in scripted agent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.backs.demo.config import DemoBackConfig
from bridge.registry import BackKind

if TYPE_CHECKING:
    from bridge.backs.base import Back
    from bridge.config import Route

__all__ = ["BACK"]


def _make(name: str, route: Route) -> Back:
    from bridge.backs.demo.back import DemoBack

    return DemoBack(name, route)


BACK = BackKind(kind="demo", config=DemoBackConfig, factory=_make)
