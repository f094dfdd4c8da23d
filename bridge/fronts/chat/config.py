"""`[ws]`: the chat front's settings (`/ws` and the `/api/sessions` REST API)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds

__all__ = ["WsFrontConfig"]


class WsFrontConfig(ConfigStruct):
    """The chat event stream front: `/ws` (WebSocket) and `/api/sessions` (REST).

    The bearer token is read from an environment variable or a file, never written
    in the config and never logged; with neither configured, no token is asked for.
    """

    token_env: str | None = None
    token_file: str | None = None
    # Browser origins allowed to connect ("*" allows any); requests without an Origin
    # header (not from a browser) are allowed, the token still applies.
    allowed_origins: list[str] = []
    # The largest client frame; a larger one gets `system:error` and close 1009.
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024
    # Client frames per second per connection, and the burst allowed above that rate.
    max_messages_per_s: Annotated[float, msgspec.Meta(gt=0)] = 50.0
    message_burst: Annotated[int, msgspec.Meta(ge=1)] = 200
    # Frames waiting for one client. Over this the client is disconnected (close 4008,
    # "slow consumer"); the back is never paused for a WebSocket client.
    queue_max_frames: Annotated[int, msgspec.Meta(ge=16)] = 8192
    # A client that has not accepted a write for this long while frames wait is
    # disconnected the same way.
    slow_client_timeout_s: PositiveSeconds = 10.0
    # Without an Authorization header, the first frame must carry `auth.token` within this.
    auth_timeout_s: PositiveSeconds = 10.0
    max_subscriptions: Annotated[int, msgspec.Meta(ge=1)] = 100
    # A text or thinking block ends at this many characters (the next chunk opens a new one).
    block_max_chars: Annotated[int, msgspec.Meta(ge=64)] = 2048
    # WebSocket pings keep idle connections (and NATs) alive: a client that sent nothing
    # for this long is pinged within as long again (one task pings them all). None: no pings.
    ping_interval_s: PositiveSeconds | None = 30.0
    # permessage-deflate costs ~300 KiB per connection in zlib state; off by default.
    permessage_deflate: bool = False
    # Write every waiting frame in one socket write (hypercorn's WebSocket stream);
    # false: one ASGI `websocket.send` per frame.
    batch_writes: bool = True
    # The canonical event streams (`GET /api/sessions/{id}/events`) and the change feed
    # (`GET /api/changes`), SSE: how many may be open at once (over it: 503); what waits
    # for one client, in events and bytes (over either the stream ends: the client
    # resumes with Last-Event-ID from the store); a `: ping` comment after this long
    # without a write; sessions changed and not yet sent to one feed client (over it
    # the feed says `reset`: the client reads the list again).
    max_event_streams: Annotated[int, msgspec.Meta(ge=1)] = 1000
    events_queue_max: Annotated[int, msgspec.Meta(ge=16)] = 10_000
    events_queue_max_bytes: Annotated[int, msgspec.Meta(ge=65536)] = 8 * 1024 * 1024
    events_heartbeat_s: PositiveSeconds = 15.0
    changes_max_pending: Annotated[int, msgspec.Meta(ge=1)] = 1000

    @property
    def token_required(self) -> bool:
        return self.token_env is not None or self.token_file is not None

    def token(self) -> str | None:
        """The token: `token_env`'s value if set, else `token_file`'s content; None if neither yields one.

        Read at start-up, like `acp_auth`: a configured but missing token refuses
        every client (fail closed) rather than serving without one.
        """
        if self.token_env is not None and os.environ.get(self.token_env):
            return os.environ[self.token_env]
        if self.token_file is not None:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        return None

