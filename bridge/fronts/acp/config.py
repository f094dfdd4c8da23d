"""`[acp]`: the ACP front's settings (stdio and the daemon's unix socket)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds

__all__ = ["AcpFrontConfig"]


class AcpFrontConfig(ConfigStruct):
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    # Events waiting for the editor before the back is paused (backpressure).
    outbox_max_events: Annotated[int, msgspec.Meta(ge=16)] = 8192
    # A request to the editor (permission, elicitation) not answered by then fails.
    request_timeout_s: PositiveSeconds = 600.0

