"""`[routes.NAME.back] kind = "a2a"`: a remote A2A agent and how to reach it."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds, hidden_values

__all__ = ["A2ABackConfig"]


class A2ABackConfig(ConfigStruct, tag="a2a", tag_field="kind"):
    """A remote A2A agent, 1.0 or 0.3, over JSON-RPC or HTTP+JSON (bridge/backs/a2a/back.py).

    Secrets are named, never written here: `token_env` / `token_file` are read when a
    call is made; a relative `token_file` is looked up in $CREDENTIALS_DIRECTORY
    (systemd LoadCredential=) when that is set.
    """

    url: str | None = None  # the agent; its card is read from {url}/.well-known/agent-card.json
    card_url: str | None = None  # or: the card itself
    dialect: Literal["auto", "1.0", "0.3"] = "auto"
    binding: Literal["auto", "jsonrpc", "http+json"] = "auto"
    token_env: str | None = None
    token_file: str | None = None
    # Send the token raw in this header, whatever the card's security scheme says.
    auth_header: str | None = None
    # Other origins (scheme://host:port) the card may send calls to with the token.
    auth_origins: list[str] = []
    headers: dict[str, str] = {}  # sent with every call
    ca_file: str | None = None  # PEM bundle to trust instead of the system's CAs
    connect_timeout_s: PositiveSeconds = 10.0
    first_event_timeout_s: PositiveSeconds = 60.0  # a call's first answer or event
    idle_timeout_s: PositiveSeconds = 300.0  # silence on a stream before it counts as broken
    return_immediately: bool = True  # without streaming: send, then poll GetTask
    poll_interval_s: PositiveSeconds = 1.0  # the longest wait between two GetTask polls
    resume_attempts: Annotated[int, msgspec.Meta(ge=0)] = 5
    card_ttl_s: Annotated[float, msgspec.Meta(ge=0)] = 300.0  # when the agent sends no Cache-Control
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = 16
    max_event_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if (self.url is None) == (self.card_url is None):
            raise ValueError("set exactly one of url and card_url")
        for u in (self.url, self.card_url, *self.auth_origins):
            if u is not None and not re.match(r"^https?://[^/\s]+", u):
                raise ValueError(f"{u!r} is not an http:// or https:// URL")
        if self.token_env and self.token_file:
            raise ValueError("set token_env or token_file, not both")
        if self.auth_header and not (self.token_env or self.token_file):
            raise ValueError("auth_header needs token_env or token_file")
        for name, value in self.headers.items():
            # Values are not quoted back: they may be secrets after all.
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name) or not (value.isprintable() and value.isascii()):
                raise ValueError(f"headers: {name!r} is not a valid header name, or its value holds control characters")

    def __repr__(self) -> str:
        return f"A2ABackConfig(url={self.url!r}, card_url={self.card_url!r}, headers={hidden_values(self.headers)})"

