"""`[routes.NAME.back] kind = "chat"`: a remote chat-event-stream server (WebSocket or Socket.IO)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds, hidden_values

__all__ = ["ChatBackConfig"]


class ChatBackConfig(ConfigStruct, tag="chat", tag_field="kind"):
    """A remote agent platform on the chat event stream (bridge/backs/chat/back.py): another
    agent-bridge's `/ws` (dialect "ws") or Blade's Socket.IO API (dialect "socketio",
    Engine.IO v4 over WebSocket only; blade-hq/public-docs `api/websocket.md`).

    Secrets are named, never written here: `token_env` / `token_file` are read when a
    connection is made (a relative `token_file` in $CREDENTIALS_DIRECTORY when set).
    """

    # ws:// or wss:// (http:// and https:// mean the same); for "socketio" the Socket.IO
    # path, e.g. wss://host/socket.io/
    url: str
    dialect: Literal["ws", "socketio"] = "ws"
    # POST /api/sessions and GET /api/sessions/{id}/messages live here; default: url's origin.
    rest_url: str | None = None
    token_env: str | None = None
    token_file: str | None = None
    namespace: str = "/"  # the Socket.IO namespace
    # Merged into the POST /api/sessions body (e.g. {route = "demo"} for an agent-bridge peer).
    session_params: dict[str, str | int | float | bool] = {}
    ca_file: str | None = None  # PEM bundle to trust instead of the system's CAs
    connect_timeout_s: PositiveSeconds = 10.0  # connect, handshake and subscribe
    request_timeout_s: PositiveSeconds = 30.0  # one REST call
    first_event_timeout_s: PositiveSeconds = 60.0  # chat:send until the run's first frame
    idle_timeout_s: PositiveSeconds = 300.0  # silence in a running run before the turn fails
    # "ws": our WebSocket pings (a pong must come back within the interval); None: none.
    # "socketio" follows the server's own pingInterval/pingTimeout.
    ping_interval_s: PositiveSeconds | None = 30.0
    reconnect_attempts: Annotated[int, msgspec.Meta(ge=0)] = 5
    reconnect_backoff_s: PositiveSeconds = 0.25  # doubled after each failed attempt
    reconnect_max_backoff_s: PositiveSeconds = 5.0
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    # Frames read ahead of the turn; when full, reading pauses (backpressure on the socket).
    queue_max_frames: Annotated[int, msgspec.Meta(ge=16)] = 1024

    def __post_init__(self) -> None:
        if not re.match(r"^(wss?|https?)://[^/\s]+", self.url):
            raise ValueError(f"url: {self.url!r} is not a ws://, wss://, http:// or https:// URL")
        if self.rest_url is not None and not re.match(r"^https?://[^/\s]+", self.rest_url):
            raise ValueError(f"rest_url: {self.rest_url!r} is not an http:// or https:// URL")
        if self.token_env and self.token_file:
            raise ValueError("set token_env or token_file, not both")
        if not self.namespace.startswith("/") or "," in self.namespace:
            raise ValueError(f"namespace: {self.namespace!r} must start with '/' and hold no ','")

    def __repr__(self) -> str:
        url = self.url.partition("?")[0]  # a query may carry a key
        return f"ChatBackConfig(url={url!r}, dialect={self.dialect!r}, session_params={hidden_values(self.session_params)})"

