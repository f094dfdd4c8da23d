"""`[a2a]` and `[routes.NAME.a2a]`: the A2A front's settings, and each route as an A2A agent."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds, read_secret

__all__ = ["A2AFrontConfig", "A2ARouteConfig", "A2ASkill"]


class A2ASkill(ConfigStruct):
    """An A2A `AgentSkill` written on a route's agent card (A2A spec §8, Agent Card: `AgentSkill`)."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = []
    examples: list[str] = []


class A2ARouteConfig(ConfigStruct):
    """`[routes.NAME.a2a]`: the route as an A2A agent at `/a2a/NAME` (bridge/fronts/a2a/front.py).

    A token is named, never written here: `token_env` / `token_file` are read when the
    daemon starts (a relative file in $CREDENTIALS_DIRECTORY under systemd). With
    one, every A2A call needs it (`Authorization: Bearer`, or the `api_key_header`),
    and the card says so; a configured token that cannot be read refuses every call.
    """

    expose: bool = True
    token_env: str | None = None
    token_file: str | None = None
    api_key_header: str | None = None
    skills: list[A2ASkill] = []  # beside the skills made from the back's commands
    # GetExtendedAgentCard (needs a token): the public card plus these skills.
    extended_card: bool = False
    extended_skills: list[A2ASkill] = []
    provider_organization: str | None = None
    provider_url: str | None = None
    documentation_url: str | None = None
    icon_url: str | None = None

    def __post_init__(self) -> None:
        if self.token_env and self.token_file:
            raise ValueError("set token_env or token_file, not both")
        if (self.api_key_header or self.extended_card) and not (self.token_env or self.token_file):
            raise ValueError("api_key_header and extended_card need token_env or token_file")
        if self.api_key_header and not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", self.api_key_header):
            raise ValueError(f"api_key_header: {self.api_key_header!r} is not a header name")

    @property
    def token_required(self) -> bool:
        return bool(self.token_env or self.token_file)

    def token(self) -> str | None:
        """The token (`token_env`'s value, else `token_file`'s content); None if none can be read."""
        return read_secret(self.token_env, self.token_file)



class A2AFrontConfig(ConfigStruct):
    """`[a2a]`: the A2A front, every route as an A2A agent at `/a2a/{route}` (bridge/fronts/a2a/front.py)."""

    # The route whose card is served at /.well-known/agent-card.json; default: the
    # top-level `default_route`, else the only route.
    default_route: str | None = None
    # The base URL written in agent cards (behind a proxy); default: the request's own.
    public_url: str | None = None
    card_max_age_s: Annotated[int, msgspec.Meta(ge=0)] = 300
    # Webhook hosts push notifications may go to: "host", "host:port", "*.example.com",
    # or "*" for any. Empty: push notifications are off (the card says so).
    push_allowed_hosts: list[str] = []
    push_max_attempts: Annotated[int, msgspec.Meta(ge=1)] = 5
    push_backoff_s: PositiveSeconds = 0.5  # before the first retry; doubled each time
    push_max_backoff_s: PositiveSeconds = 30.0
    push_timeout_s: PositiveSeconds = 10.0
    push_max_configs: Annotated[int, msgspec.Meta(ge=1)] = 10  # per task
    # Notifications waiting for one webhook; over this the oldest are dropped (logged).
    push_queue_max: Annotated[int, msgspec.Meta(ge=16)] = 256
    # Events waiting for one SSE client; over this the stream is closed (its task goes on).
    stream_queue_max_events: Annotated[int, msgspec.Meta(ge=16)] = 8192
    # SubscribeToTask streams: per task, and in all waiting on interrupted tasks
    # (bridge/fronts/a2a/waiting.py); over either, SubscribeToTask is refused.
    max_subscribers_per_task: Annotated[int, msgspec.Meta(ge=1)] = 16
    max_waiting_subscribers: Annotated[int, msgspec.Meta(ge=1)] = 1024
    heartbeat_s: PositiveSeconds = 15.0  # a `: keepalive` comment on a quiet stream
    # A session the A2A front opened is closed (its agent freed) after this long with no
    # task running or waiting for input; a later message on its context reopens it.
    idle_close_s: PositiveSeconds = 300.0
    # At most this many such idle sessions stay open (the longest idle is closed first):
    # memory stays bounded when every message opens a new context.
    max_idle_sessions: Annotated[int, msgspec.Meta(ge=0)] = 64

    def __post_init__(self) -> None:
        if self.public_url is not None and not re.match(r"^https?://[^/\s]+", self.public_url):
            raise ValueError(f"public_url: {self.public_url!r} is not an http:// or https:// URL")
        for host in self.push_allowed_hosts:
            if not re.fullmatch(r"\*|(\*\.)?[A-Za-z0-9.-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?", host):
                raise ValueError(f"push_allowed_hosts: {host!r} is not a host, host:port or *.domain")

