"""`[routes.NAME.back] kind = "demo"`: the settings of the built-in scripted agent."""

from __future__ import annotations

from typing import Annotated

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds

__all__ = ["DemoBackConfig"]


class DemoBackConfig(ConfigStruct, tag="demo", tag_field="kind"):
    """The built-in scripted agent (README: "The demo agent")."""

    chunk_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.02
    slow_duration_s: PositiveSeconds = 5.0

