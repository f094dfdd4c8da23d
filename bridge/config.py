"""Configuration: TOML decoded into frozen msgspec Structs, validated whole before use.

Unknown keys and bad values are rejected with their `$.path`. `load_config` collects
every problem it can find (each route is checked on its own) and raises one
`ConfigError` listing them all, so `agent-bridge check-config` can print them together.
Units are in the names (`_s`, `_bytes`).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from bridge.errors import ConfigError
from bridge.prompts.config import McpFrontConfig, PromptSource, PromptTemplate, check_prompts

__all__ = [
    "A2ABack",
    "A2AFrontConfig",
    "A2ARouteConfig",
    "A2ASkill",
    "AcpAuth",
    "AcpBack",
    "AcpMcpServer",
    "AcpFrontConfig",
    "BackConfig",
    "ChatBack",
    "Config",
    "DaemonConfig",
    "DemoBack",
    "EnvFrom",
    "OptionValue",
    "Route",
    "RouteOption",
    "ServerConfig",
    "StoreConfig",
    "WsFrontConfig",
    "default_config_path",
    "listen_address",
    "load_config",
    "parse_config",
]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class _Conf(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    pass


def _read_secret(env: str | None, file: str | None) -> str | None:
    """`env`'s value, else `file`'s content (relative: in $CREDENTIALS_DIRECTORY under
    systemd); None if neither yields one."""
    if env:
        return os.environ.get(env) or None
    if file:
        path = Path(file)
        if not path.is_absolute() and os.environ.get("CREDENTIALS_DIRECTORY"):
            path = Path(os.environ["CREDENTIALS_DIRECTORY"]) / path
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
    return None


class DemoBack(_Conf, tag="demo", tag_field="kind"):
    """The built-in scripted agent (README: "The demo agent")."""

    chunk_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.02
    slow_duration_s: PositiveSeconds = 5.0


class EnvFrom(_Conf):
    """A value taken from the bridge's environment when the agent starts (never logged)."""

    env: str


def _hidden(values: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" if isinstance(v, EnvFrom) else f"{k!r}: <hidden>" for k, v in values.items()) + "}"


class AcpMcpServer(_Conf):
    """An MCP server handed to the agent in `session/new` (protocols.md §1.4, McpServer)."""

    name: str
    type: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = None
    args: list[str] = []
    env: dict[str, str | EnvFrom] = {}
    url: str | None = None
    headers: dict[str, str | EnvFrom] = {}

    def __post_init__(self) -> None:
        if self.type == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.type != "stdio" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: an {self.type} server needs a url")

    def __repr__(self) -> str:  # env and header values may be secrets (STYLE.md rule 21)
        return f"AcpMcpServer(name={self.name!r}, type={self.type!r}, env={_hidden(self.env)}, headers={_hidden(self.headers)})"


class AcpBack(_Conf, tag="acp", tag_field="kind"):
    """A coding agent that speaks ACP, spawned as a subprocess (bridge/backs/acp/back.py)."""

    command: Annotated[list[str], msgspec.Meta(min_length=1)]
    # Set for the agent: a literal value, or {env = "NAME"} to pass on one of ours.
    env: dict[str, str | EnvFrom] = {}
    # False: the agent sees only PATH, HOME, USER, LANG and the like, plus `env`.
    inherit_env: bool = False
    cwd: str | None = None  # the agent's working directory; default: the session's
    mcp_servers: list[AcpMcpServer] = []
    multiplex: bool = False  # one agent process serves every session of the route
    auth_method: str | None = None  # `authenticate` with this methodId after initialize
    permissions: Literal["ask", "allow_read", "deny"] = "ask"
    # Without an ACP editor offering them: serve fs/* inside `cwd` (read, or read and
    # write), and terminal/* there, keeping at most terminal_output_bytes per terminal.
    fs: Literal["off", "read", "cwd"] = "off"
    terminal: bool = False
    terminal_output_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024
    max_terminals: Annotated[int, msgspec.Meta(ge=1)] = 8
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    startup_timeout_s: PositiveSeconds = 60.0  # initialize + session/new (or load)
    request_timeout_s: PositiveSeconds = 30.0  # set_config_option, set_mode, session/close
    kill_grace_s: PositiveSeconds = 3.0  # SIGTERM → SIGKILL for the agent's process group
    # fs/read_text_file and fs/write_text_file served by the bridge: each is bounded by
    # this long (a file that blocks, such as a FIFO, is refused before it is opened).
    fs_timeout_s: PositiveSeconds = 10.0

    def __post_init__(self) -> None:
        if self.cwd is not None and not os.path.isabs(self.cwd):
            raise ValueError(f"cwd must be an absolute path, got {self.cwd!r}")
        if (self.fs != "off" or self.terminal) and self.cwd is None:
            raise ValueError("fs and terminal are served inside cwd: set cwd")

    def __repr__(self) -> str:
        return f"AcpBack(command={self.command!r}, env={_hidden(self.env)}, cwd={self.cwd!r}, multiplex={self.multiplex})"


class A2ABack(_Conf, tag="a2a", tag_field="kind"):
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
        return f"A2ABack(url={self.url!r}, card_url={self.card_url!r}, headers={_hidden(self.headers)})"


class ChatBack(_Conf, tag="chat", tag_field="kind"):
    """A remote agent platform on the chat event stream (bridge/backs/chat/back.py): another
    agent-bridge's `/ws` (dialect "ws") or Blade's Socket.IO API (dialect "socketio",
    Engine.IO v4 over WebSocket only), protocols.md §4.

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
        return f"ChatBack(url={url!r}, dialect={self.dialect!r}, session_params={_hidden(self.session_params)})"


BackConfig = DemoBack | AcpBack | A2ABack | ChatBack


class OptionValue(_Conf):
    value: str
    name: str
    description: str | None = None


class RouteOption(_Conf):
    """A select option the user can change per session (ACP config option / mode)."""

    id: str
    name: str
    values: list[OptionValue]
    default: str | None = None
    description: str | None = None
    category: str | None = None  # "mode" also makes it the ACP session mode


class AcpAuth(_Conf):
    """ACP `authenticate`: the route is usable once the named variable is set."""

    token_env: str
    method_id: str = "env-token"
    name: str = "Token from the environment"
    description: str | None = None


class A2ASkill(_Conf):
    """An A2A `AgentSkill` written on a route's agent card (protocols.md §2.5)."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = []
    examples: list[str] = []


class A2ARouteConfig(_Conf):
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
        return _read_secret(self.token_env, self.token_file)


class Route(_Conf):
    back: BackConfig
    title: str | None = None
    description: str | None = None
    version: str = "1.0.0"
    options: list[RouteOption] = []
    acp_auth: AcpAuth | None = None
    a2a: A2ARouteConfig = A2ARouteConfig()
    # An unanswered question is answered "reject" after this long (never "allow").
    question_timeout_s: PositiveSeconds = 300.0
    # After a cancel, how long the back gets to stop before it is cut off.
    cancel_grace_s: PositiveSeconds = 5.0
    # A whole turn may run at most this long; None: no limit.
    turn_timeout_s: PositiveSeconds | None = None
    # A turn whose back sends nothing (no event of any kind) for this long fails
    # ("the agent stopped responding"); time spent waiting for a user's answer does not
    # count. 0 turns it off.
    turn_idle_timeout_s: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    # Live sessions of this route at most (None: only the daemon-wide cap applies). When
    # full, the longest-idle session is closed (it stays in the store); with none idle, a
    # new session is refused with a clear error.
    max_live_sessions: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # Slash commands (bridge/prompts/config.py): the route's own prompt templates and MCP
    # prompt sources, beside the shared `[prompts.*]` and `[[prompt_sources]]` unless
    # `shared_prompts` is false.
    prompts: dict[str, PromptTemplate] = {}
    prompt_sources: list[PromptSource] = []
    shared_prompts: bool = True


class AcpFrontConfig(_Conf):
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    # Events waiting for the editor before the back is paused (backpressure).
    outbox_max_events: Annotated[int, msgspec.Meta(ge=16)] = 8192
    # A request to the editor (permission, elicitation) not answered by then fails.
    request_timeout_s: PositiveSeconds = 600.0


class ServerConfig(_Conf):
    """The daemon's one HTTP listener (`agent-bridge serve`)."""

    listen: str = "127.0.0.1:8765"  # host:port; port 0 lets the OS choose
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    # On shutdown, how long open requests and streams get to finish.
    graceful_timeout_s: PositiveSeconds = 10.0
    # Browser safety, for every HTTP front (README: "Security and limits"). On a loopback
    # listener a request's Host must name a loopback address or one of `allowed_hosts`
    # (DNS rebinding); on any listener a browser's Origin must be loopback or one of
    # `allowed_origins` ("scheme://host[:port]", or "*" for any).
    allowed_hosts: list[str] = []
    allowed_origins: list[str] = []
    # Operators' token: /readyz details (routes, backs, sources) and, with
    # `metrics_need_token`, /metrics. Without one, /readyz says only ready or not.
    admin_token_env: str | None = None
    admin_token_file: str | None = None
    metrics_need_token: bool = False
    # JSON a client or a back sends is refused (as that protocol's parse error) past this
    # nesting depth; it bounds the recursion every later step does over it.
    max_json_depth: Annotated[int, msgspec.Meta(ge=8, le=512)] = 64

    def __post_init__(self) -> None:
        if self.metrics_need_token and not (self.admin_token_env or self.admin_token_file):
            raise ValueError("metrics_need_token needs admin_token_env or admin_token_file")
        for origin in self.allowed_origins:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ValueError(f"allowed_origins: {origin!r} is not \"*\" or scheme://host[:port]")
        for host in self.allowed_hosts:
            if not re.fullmatch(r"(\*\.)?[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]", host):
                raise ValueError(f"allowed_hosts: {host!r} is not a host name (without a port)")

    def admin_token(self) -> str | None:
        """The operators' token: `admin_token_env`'s value if set, else `admin_token_file`'s
        content; None when neither yields one (then every admin request is refused)."""
        return _read_secret(self.admin_token_env, None) or _read_secret(None, self.admin_token_file)


class DaemonConfig(_Conf):
    """`agent-bridge serve` as a service: the ACP unix socket, reload and shutdown, health."""

    # The ACP front's unix socket (`agent-bridge acp --connect`): true = the default path
    # ($RUNTIME_DIRECTORY/acp.sock under systemd, else $XDG_RUNTIME_DIR/agent-bridge/acp.sock,
    # else /tmp/agent-bridge-UID/acp.sock), a path, or false for none. A socket passed
    # by systemd (socket activation) is used instead.
    acp_socket: str | bool = True
    acp_socket_mode: Annotated[str, msgspec.Meta(pattern="^0?[0-7]{3}$")] = "0600"
    # SIGTERM: running turns get this long to finish, then they are cancelled.
    shutdown_grace_s: PositiveSeconds = 30.0
    # SIGHUP: running turns of a removed route get this long to finish, then they are cancelled.
    reload_grace_s: PositiveSeconds = 300.0
    # /readyz: each route's back is checked at most this often, each check bounded by the timeout.
    probe_timeout_s: PositiveSeconds = 5.0
    probe_interval_s: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    # A live session nobody uses (no turn running, no client attached or watching) is
    # closed after this long, its agent process with it; it comes back from the store
    # when a client asks for it. 0: never.
    idle_session_close_s: Annotated[float, msgspec.Meta(ge=0)] = 1800.0
    # Live sessions at most, every route together. When full, the longest-idle session
    # is closed (it stays in the store); with none idle, a new one is refused.
    max_live_sessions: Annotated[int, msgspec.Meta(ge=1)] = 2000
    # Under systemd: every credential named like an environment variable (LoadCredential=
    # NAME:...) is put in our environment if not set, so `token_env` and `{env = "NAME"}` find it.
    env_from_credentials: bool = True
    metrics: bool = True  # serve GET /metrics

    def __post_init__(self) -> None:
        if isinstance(self.acp_socket, str) and not os.path.isabs(self.acp_socket):
            raise ValueError(f"acp_socket must be an absolute path, got {self.acp_socket!r}")
        if isinstance(self.acp_socket, str) and len(os.fsencode(self.acp_socket)) > 107:
            raise ValueError("acp_socket: a unix socket path is at most 107 bytes")


class StoreConfig(_Conf):
    state_dir: str | None = None  # default: $XDG_STATE_HOME/agent-bridge
    flush_interval_s: PositiveSeconds = 0.05


class WsFrontConfig(_Conf):
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
    # WebSocket pings keep idle connections (and NATs) alive; None: no pings.
    ping_interval_s: PositiveSeconds | None = 30.0
    # permessage-deflate costs ~300 KiB per connection in zlib state; off by default.
    permessage_deflate: bool = False
    # Write every waiting frame in one socket write (hypercorn's WebSocket stream);
    # false: one ASGI `websocket.send` per frame.
    batch_writes: bool = True

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


class A2AFrontConfig(_Conf):
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


class Config(_Conf):
    routes: dict[str, Route]
    default_route: str | None = None
    acp: AcpFrontConfig = AcpFrontConfig()
    ws: WsFrontConfig = WsFrontConfig()
    a2a: A2AFrontConfig = A2AFrontConfig()
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    daemon: DaemonConfig = DaemonConfig()
    mcp: McpFrontConfig = McpFrontConfig()
    # Shared by every route: prompt templates and MCP prompt sources (bridge/prompts).
    prompts: dict[str, PromptTemplate] = {}
    prompt_sources: list[PromptSource] = []
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    def route(self, name: str) -> Route:
        return self.routes[name]


_SECTIONS: dict[str, Any] = {
    "a2a": A2AFrontConfig,
    "acp": AcpFrontConfig,
    "daemon": DaemonConfig,
    "mcp": McpFrontConfig,
    "server": ServerConfig,
    "store": StoreConfig,
    "ws": WsFrontConfig,
}


def _problem(path: str, exc: msgspec.ValidationError) -> str:
    msg = str(exc)
    # msgspec says "... - at `$.a.b`"; re-root the path at the section we decoded.
    m = re.search(r" - at `\$(.*)`$", msg)
    if m:
        path, msg = path + m.group(1), msg[: m.start()]
    # An unknown key is reported at its own path (`$.routes.x.tiemout_s`), not its table's.
    u = re.fullmatch(r"Object contains unknown field `(.*)`", msg)
    if u:
        return f"{path}.{u.group(1)}: unknown key"
    return f"{path}: {msg}"


def _check_route(name: str, route: Route) -> list[str]:
    problems: list[str] = []
    where = f"$.routes.{name}"
    if not _NAME.match(name):
        problems.append(f"{where}: route names use letters, digits, '_', '.', '-' (at most 64)")
    seen: set[str] = set()
    for i, opt in enumerate(route.options):
        if opt.id in seen:
            problems.append(f"{where}.options[{i}].id: duplicate option id {opt.id!r}")
        seen.add(opt.id)
        if not opt.values:
            problems.append(f"{where}.options[{i}].values: at least one value is needed")
        elif opt.default is not None and opt.default not in {v.value for v in opt.values}:
            problems.append(f"{where}.options[{i}].default: {opt.default!r} is not one of its values")
    return problems


def parse_config(raw: dict[str, Any]) -> Config:
    """Validate a decoded TOML document; raise ConfigError listing every problem."""
    problems: list[str] = []
    routes: dict[str, Route] = {}
    raw_routes = raw.get("routes", {})
    if not isinstance(raw_routes, dict):
        problems.append("$.routes: Expected `table`")
        raw_routes = {}
    for name, body in raw_routes.items():
        try:
            route = msgspec.convert(body, Route)
        except msgspec.ValidationError as exc:
            problems.append(_problem(f"$.routes.{name}", exc))
            continue
        problems += _check_route(name, route)
        routes[name] = route
    sections: dict[str, Any] = {}
    for key, typ in _SECTIONS.items():
        if key in raw:
            try:
                sections[key] = msgspec.convert(raw[key], typ)
            except msgspec.ValidationError as exc:
                problems.append(_problem(f"$.{key}", exc))
    rest = {k: v for k, v in raw.items() if k not in _SECTIONS and k != "routes"}
    top: Config | None = None
    try:
        top = msgspec.convert({**rest, "routes": {}}, Config)
    except msgspec.ValidationError:
        # msgspec stops at the first bad key; check each top-level key on its own so
        # that every one of them is reported.
        for key, value in rest.items():
            try:
                msgspec.convert({key: value, "routes": {}}, Config)
            except msgspec.ValidationError as exc:
                problems.append(_problem("$", exc))
    if not raw_routes:
        problems.append("$.routes: at least one route is needed")
    default_route = raw.get("default_route")
    if isinstance(default_route, str) and default_route not in raw_routes:
        problems.append(f"$.default_route: no route named {default_route!r}")
    a2a = sections.get("a2a")
    if a2a is not None and a2a.default_route is not None and a2a.default_route not in raw_routes:
        problems.append(f"$.a2a.default_route: no route named {a2a.default_route!r}")
    server = sections.get("server")
    if server is not None and _split_listen(server.listen) is None:
        problems.append(f"$.server.listen: expected HOST:PORT, got {server.listen!r}")
    if top is not None:
        problems += check_prompts(msgspec.structs.replace(top, routes=routes))
    if problems or top is None:
        raise ConfigError(problems)
    return msgspec.structs.replace(top, routes=routes, **sections)


def _split_listen(listen: str) -> tuple[str, int] | None:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host.strip("[]"), int(port)


def listen_address(server: ServerConfig) -> tuple[str, int]:
    """(host, port) of `server.listen`, validated by `parse_config`."""
    parsed = _split_listen(server.listen)
    assert parsed is not None
    return parsed


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate a TOML file; None means the embedded demo configuration."""
    file = Path(path) if path is not None else default_config_path()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{file}: cannot read: {exc.strerror}"]) from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{file}: not valid TOML: {exc}"]) from exc
    return parse_config(raw)


def default_config_path() -> Path:
    """The embedded demo config: packaged beside this module, or in the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "demo.toml", here.parent / "configs" / "demo.toml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(["the embedded demo configuration is missing from this installation"])
