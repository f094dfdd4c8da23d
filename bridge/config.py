"""Configuration: TOML decoded into frozen msgspec Structs, validated whole before use.

Unknown keys and bad values are rejected with their `$.path`. `load_config` collects
every problem it can find (each route is checked on its own) and raises one
`ConfigError` listing them all, so `agent-bridge check-config` can print them together.
Units are in the names (`_s`, `_bytes`).

What this module knows is what is not a protocol's: routes, `[server]`, `[store]`,
`[daemon]`, prompts. A back's settings (`[routes.NAME.back]`, tagged by `kind`) and a
front's (`[NAME]`, `[routes.R.NAME]`) are Structs declared by their packages and found
through the protocol registry (bridge/registry.py), after the modules named in
`plugins` are imported. Read a front's section with `config.section(TheStruct)`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from bridge import registry
from bridge.config_check import problem_of, problems_in, with_route_hint
from bridge.config_secret import MAX_SECRET_BYTES, read_secret  # noqa: F401 (read_secret's home for its callers)
from bridge.core.access import RouteAccess
from bridge.errors import ConfigError, ConfigProblem
from bridge.prompts.config import PromptSource, PromptTemplate, check_prompts
from bridge.telemetry.config import TelemetryConfig
from bridge.transport.config import OAuthConfig

__all__ = [
    "AcpAuth",
    "AuthConfig",
    "ClusterConfig",
    "Config",
    "ConfigStruct",
    "DaemonConfig",
    "IssuerConfig",
    "Limits",
    "LimitsConfig",
    "OptionValue",
    "PositiveSeconds",
    "Route",
    "RouteOption",
    "ServerConfig",
    "StoreConfig",
    "default_config_path",
    "hidden_values",
    "listen_address",
    "load_config",
    "parse_config",
    "read_secret",
    "secret_refs",
]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_T = TypeVar("_T")


class ConfigStruct(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The base of every config Struct, a protocol's included (STYLE.md rules 8 and 20)."""


def hidden_values(values: Mapping[str, Any]) -> str:
    """A mapping for a `repr`, its values hidden: they may be secrets (STYLE.md rule 21)."""
    return "{" + ", ".join(f"{k!r}: <hidden>" for k in values) + "}"


def _section(found: Mapping[str, Any], typ: type[_T]) -> _T:
    for value in found.values():
        if type(value) is typ:
            return value  # type: ignore[no-any-return]
    return typ()  # a Struct built by hand (tests) without its protocols' sections


class OptionValue(ConfigStruct):
    value: str
    name: str
    description: str | None = None


class RouteOption(ConfigStruct):
    """A select option the user can change per session (ACP config option / mode)."""

    id: str
    name: str
    values: list[OptionValue]
    default: str | None = None
    description: str | None = None
    category: str | None = None  # "mode" also makes it the ACP session mode


class AcpAuth(ConfigStruct):
    """ACP `authenticate`: the route is usable once the named variable is set."""

    token_env: str
    method_id: str = "env-token"
    name: str = "Token from the environment"
    description: str | None = None



_Count = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
_PerMinute = Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]


class Limits(ConfigStruct):
    """Turn limits (bridge/session/limits.py): how many turns may run at once and start per
    minute (a token bucket holding `burst` turns, refilled at `requests_per_minute`),
    for the route as a whole and for each caller (its `Identity.key`) on it. Unset: the
    `[limits]` default; 0: no limit. A turn over a limit is refused, never queued."""

    max_concurrent_turns: _Count | None = None
    requests_per_minute: _PerMinute | None = None
    burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None  # default: requests_per_minute, rounded up
    per_identity_concurrent_turns: _Count | None = None
    per_identity_requests_per_minute: _PerMinute | None = None
    per_identity_burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None


class LimitsConfig(Limits):
    """`[limits]`: every route's defaults, and how many callers are remembered."""

    # Callers whose per-route counts are kept, least recently seen forgotten first (one
    # with a turn running is kept): a forgotten caller starts again with a full bucket.
    max_identities: Annotated[int, msgspec.Meta(ge=16, le=10_000_000)] = 10_000


class Route(ConfigStruct):
    # The back's own Struct, `kind`-tagged (bridge/registry.py, BackKind.config).
    back: Any
    title: str | None = None
    description: str | None = None
    version: str = "1.0.0"
    options: list[RouteOption] = []
    acp_auth: AcpAuth | None = None
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
    # `[routes.NAME.access]`: who may list, use, watch and answer its sessions (bridge/core/access.py).
    access: RouteAccess | None = None
    # `[routes.NAME.oauth]`: the back's access token from an OAuth 2 server (A2A and chat backs).
    oauth: OAuthConfig | None = None
    # `[routes.NAME.limits]`: this route's turn limits, over `[limits]`.
    limits: Limits = Limits()

    # `[routes.NAME.<front>]`, by front name (filled by `parse_config`; FrontKind.route_config).
    front_settings: dict[str, Any] = {}

    def section(self, typ: type[_T]) -> _T:
        """This route's settings for a front (`route.section(A2ARouteConfig)`); its defaults when unset."""
        return _section(self.front_settings, typ)


class ServerConfig(ConfigStruct):
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
        return read_secret(self.admin_token_env, None) or read_secret(None, self.admin_token_file)


# Signature algorithms an issuer may use: asymmetric only. `none` and the HMAC family are
# never accepted (RFC 8725 §2.1 and §3.1: an HS* check with a public key as the secret
# lets anyone who has the public key forge tokens).
ISSUER_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


class IssuerConfig(ConfigStruct):
    """`[[auth.issuers]]`: an OAuth 2.0 / OpenID Connect issuer whose bearer JWTs are accepted."""

    issuer: str  # the `iss` its tokens carry, an https (or loopback http) URL
    audience: str  # the `aud` a token must name: this bridge (RFC 8707, RFC 9068 §4)
    # Its JWK Set; None: from OIDC discovery, `{issuer}/.well-known/openid-configuration`.
    jwks_url: str | None = None
    algorithms: list[str] = msgspec.field(default_factory=lambda: ["RS256", "ES256"])
    clock_skew_s: Annotated[float, msgspec.Meta(ge=0, le=600)] = 60.0

    def __post_init__(self) -> None:
        for url in (self.issuer, self.jwks_url):
            if url is not None and not re.fullmatch(r"https://\S+|http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/\S*)?", url):
                raise ValueError(f"{url!r}: an issuer and its jwks_url are https URLs (plain http only on loopback)")
        bad = [a for a in self.algorithms if a not in ISSUER_ALGORITHMS]
        if bad or not self.algorithms:
            raise ValueError(f"algorithms: {bad or '[]'} not accepted; choose from {sorted(ISSUER_ALGORITHMS)}")

    @property
    def discovery_url(self) -> str:
        """OpenID Connect Discovery 1.0 §4: the issuer's configuration document."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


class AuthConfig(ConfigStruct):
    """`[auth]`: who may call the HTTP fronts. With an issuer, every HTTP front (agent
    cards, the console's files, /healthz aside) needs a valid bearer token from one of
    them, or that front's own static token (README: "Access control")."""

    issuers: list[IssuerConfig] = []
    # An unknown `kid` fetches the issuer's JWK Set again, at most once per this many
    # seconds per issuer: a flood of made-up kids costs one fetch, not one each.
    jwks_refresh_min_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 30.0
    # Keys are fetched again (on the next request after) this long.
    jwks_max_age_s: Annotated[float, msgspec.Meta(ge=10)] = 3600.0
    jwks_timeout_s: PositiveSeconds = 5.0
    jwks_max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=16 * 1024 * 1024)] = 512 * 1024
    # Verified tokens remembered until they expire (a repeat costs a dict lookup).
    token_cache: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 4096
    # The public URL of this bridge, for RFC 9728 `resource` and the A2A card (None: from the request's Host).
    resource_url: str | None = None
    audit: bool = True  # one `bridge.audit` log line per turn: who, route, front, outcome

    def __post_init__(self) -> None:
        names = [i.issuer for i in self.issuers]
        if len(set(names)) != len(names):
            raise ValueError("issuers: the same issuer twice")
        # A caller's key is `jwt:ISSUER:SUBJECT` (bridge/core/identity.py): were one issuer
        # another's followed by ':' (a port), a subject of the first could name a caller of
        # the second and own its sessions.
        for a in names:
            for b in names:
                if b.startswith(a + ":"):
                    raise ValueError(f"issuers: {b!r} starts with {a + ':'!r}; their callers' keys could collide")


class DaemonConfig(ConfigStruct):
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
    # when a client asks for it. 0: never. Measured (bench/session_cache.py): an idle
    # session that ran a turn holds ~12-16 KiB, plus an ACP back's agent process
    # (~43 MiB for the SDK's); bringing one back costs under a millisecond more, and
    # ~0.6 s on an ACP route (a new agent, session/load). 10 minutes keeps a session
    # warm through a pause in the same work and frees an abandoned one's agent soon
    # after (README.md, "Memory").
    idle_session_close_s: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    # Idle live sessions at most (a cache of the store): past it, the least recently
    # used idle one is closed the same way, within seconds. 64 idle ACP sessions hold
    # ~2.7 GiB of agents (bench/session_cache.py); 64 of any other back, ~1 MiB.
    max_idle_sessions: Annotated[int, msgspec.Meta(ge=1)] = 64
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


class StoreConfig(ConfigStruct):
    state_dir: str | None = None  # default: $XDG_STATE_HOME/agent-bridge
    flush_interval_s: PositiveSeconds = 0.05
    # The daemon deletes sessions nobody updated for this many days (never one with a
    # turn open or live in the daemon), about hourly, in small chunks (bridge/store/retention.py);
    # also what `agent-bridge store prune` uses without --older-than. None: kept forever.
    retention_days: Annotated[float, msgspec.Meta(gt=0)] | None = None
    # A PostgreSQL store instead of SQLite (issue 17: several daemons share it): a libpq
    # URL (`postgresql://user@host/db`, a unix socket as `?host=/run/postgresql`), or
    # the name of an environment variable or a file holding one (the URL carries the
    # password: keep it out of the config file). At most one of the three.
    url: str | None = None
    url_env: str | None = None
    url_file: str | None = None

    @property
    def postgres(self) -> bool:
        """Whether a PostgreSQL database is named (the store several daemons share)."""
        return self.url is not None or self.url_env is not None or self.url_file is not None

    # `url` carries the database's password: no repr shows it (STYLE.md rule 21).
    def __repr__(self) -> str:
        return "StoreConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.__rich_repr__()) + ")"

    def __rich_repr__(self) -> Iterator[tuple[str, object]]:
        yield "state_dir", self.state_dir
        yield "flush_interval_s", self.flush_interval_s
        yield "retention_days", self.retention_days
        yield "url", None if self.url is None else "<hidden>"
        yield "url_env", self.url_env
        yield "url_file", self.url_file


class ClusterConfig(ConfigStruct):
    """Several daemons on one PostgreSQL store (bridge/cluster/): each session's live
    turn and back run on the instance holding its lease; the others forward to it."""

    # An instance that stops renewing (killed, cut off) loses its leases and its running
    # turns are ended as interrupted within this bound; it renews every third of it.
    lease_ttl_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 10.0
    # How long a command forwarded to the owning instance may wait for its answer.
    forward_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 15.0



class Config(ConfigStruct):
    routes: dict[str, Route]
    default_route: str | None = None
    # Modules declaring more backs and fronts (bridge/registry.py), imported before the routes are read.
    plugins: list[str] = []
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    daemon: DaemonConfig = DaemonConfig()
    cluster: ClusterConfig = ClusterConfig()
    auth: AuthConfig = AuthConfig()
    telemetry: TelemetryConfig = TelemetryConfig()  # tracing (bridge/telemetry)
    # Shared by every route: prompt templates and MCP prompt sources (bridge/prompts).
    prompts: dict[str, PromptTemplate] = {}
    prompt_sources: list[PromptSource] = []
    limits: LimitsConfig = LimitsConfig()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Each front's `[name]` section, by name (filled by `parse_config`; FrontKind.config).
    front_sections: dict[str, Any] = {}

    def section(self, typ: type[_T]) -> _T:
        """A front's section (`config.section(WsFrontConfig)`); its defaults when absent."""
        return _section(self.front_sections, typ)

    @property
    def protocols(self) -> registry.Protocols:
        """The backs and fronts this configuration can use: the built-ins and its plugins."""
        return registry.load(self.plugins)


_SECTIONS: dict[str, Any] = {
    "daemon": DaemonConfig,
    "server": ServerConfig,
    "store": StoreConfig,
    "auth": AuthConfig,
    "telemetry": TelemetryConfig,
}
# Filled by parse_config: a key written here in TOML is an unknown key.
_DERIVED_CONFIG_KEY = "front_sections"
_DERIVED_ROUTE_KEY = "front_settings"


def _problems(path: str, value: Any, typ: Any, exc: msgspec.ValidationError, hint_keys: Iterable[str] = ()) -> list[str]:
    """Every problem of `value`, which msgspec refused as `typ` with `exc` (it stops at the
    first): walked by bridge/config_check.py, each with its hint."""
    return list(problems_in(value, typ, path, hint_keys=hint_keys)) or [problem_of(path, exc)]


def _check_route(name: str, route: Route) -> list[str]:
    problems: list[str] = []
    where = f"$.routes.{name}"
    if not _NAME.match(name):
        problems.append(f"{where}: route names use letters, digits, '_', '.', '-' (at most 64)")
    if route.oauth is not None:
        kind = registry.back_kind_of(route.back).kind
        if kind not in ("a2a", "chat"):
            problems.append(f"{where}.oauth: a {kind} back takes no OAuth token (the a2a and chat backs do)")
        elif getattr(route.back, "token_env", None) or getattr(route.back, "token_file", None):
            problems.append(f"{where}.oauth: the back has token_env or token_file too; set one of them")
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


def _decode_route(name: str, body: Any, protocols: registry.Protocols) -> tuple[Route | None, list[str]]:
    """One route: the Route Struct, then its back with the registry's union of back
    Structs, then each front's `[routes.NAME.<front>]` table."""
    where = f"$.routes.{name}"
    fronts = {f.key: f.route_config for f in protocols.fronts.values() if f.route_config is not None}
    settings_raw: dict[str, Any] = {}
    if isinstance(body, dict):
        if _DERIVED_ROUTE_KEY in body:
            return None, [f"{where}.{_DERIVED_ROUTE_KEY}: unknown key"]
        settings_raw = {key: body[key] for key in fronts if key in body}
        body = {k: v for k, v in body.items() if k not in settings_raw}
    # The route, its back and each front's table are checked on their own: a problem in
    # one must not hide those in the others.
    problems: list[str] = []
    route: Route | None = None
    try:
        route = msgspec.convert(body, Route)
    except msgspec.ValidationError as exc:
        problems += _problems(where, body, Route, exc)
    back: Any = None
    if isinstance(body, dict) and "back" in body:
        try:
            back = msgspec.convert(body["back"], protocols.back_union)
        except msgspec.ValidationError as exc:
            problems += _problems(f"{where}.back", body["back"], protocols.back_union, exc)
    settings: dict[str, Any] = {}
    for key, typ in fronts.items():
        try:
            settings[key] = msgspec.convert(settings_raw[key], typ) if key in settings_raw else typ()
        except msgspec.ValidationError as exc:
            problems += _problems(f"{where}.{key}", settings_raw[key], typ, exc)
    if problems or route is None:
        return None, problems
    route = msgspec.structs.replace(route, back=back, front_settings=settings)
    return route, _check_route(name, route)


def parse_config(raw: dict[str, Any]) -> Config:
    """Validate a decoded TOML document; raise ConfigError listing every problem.

    The modules in `plugins` are imported first (a problem there is reported alone:
    the routes cannot be read without the kinds they declare)."""
    try:
        plugins = msgspec.convert(raw.get("plugins", []), list[str])
    except msgspec.ValidationError as exc:
        raise ConfigError([problem_of("$.plugins", exc)]) from exc
    protocols = registry.load(plugins)
    problems: list[str] = []
    routes: dict[str, Route] = {}
    raw_routes = raw.get("routes", {})
    if not isinstance(raw_routes, dict):
        problems.append("$.routes: Expected `table`")
        raw_routes = {}
    for name, body in raw_routes.items():
        route, route_problems = _decode_route(name, body, protocols)
        problems += route_problems
        if route is not None:
            routes[name] = route
    section_types = {**_SECTIONS, **{f.key: f.config for f in protocols.fronts.values() if f.config is not None}}
    sections: dict[str, Any] = {}
    for key, typ in section_types.items():
        try:
            sections[key] = msgspec.convert(raw[key], typ) if key in raw else typ()
        except msgspec.ValidationError as exc:
            problems += _problems(f"$.{key}", raw[key], typ, exc)
    rest = {k: v for k, v in raw.items() if k not in section_types and k != "routes"}
    if _DERIVED_CONFIG_KEY in rest:
        del rest[_DERIVED_CONFIG_KEY]
        problems.append(f"$.{_DERIVED_CONFIG_KEY}: unknown key")
    top: Config | None = None
    try:
        top = msgspec.convert({**rest, "routes": {}}, Config)
    except msgspec.ValidationError as exc:
        problems += _problems("$", {**rest, "routes": {}}, Config, exc, hint_keys=section_types)
    if not raw_routes:
        problems.append("$.routes: at least one route is needed")
    default_route = raw.get("default_route")
    if isinstance(default_route, str) and default_route not in raw_routes:
        problems.append(f"$.default_route: no route named {default_route!r}")
    for front in protocols.fronts.values():
        if front.check is not None and front.key in sections:
            try:
                problems += front.check(sections[front.key], raw_routes.keys())
            except ConfigError as exc:  # a plugin's check that raised (bridge/registry.py, `_guard`)
                problems += exc.problems
    server = sections.get("server")
    if server is not None and _split_listen(server.listen) is None:
        problems.append(f"$.server.listen: expected HOST:PORT, got {server.listen!r}")
    if top is not None:
        problems += check_prompts(msgspec.structs.replace(top, routes=routes))
    if problems or top is None:
        raise ConfigError([with_route_hint(p, raw_routes) for p in problems])
    core = {key: sections.pop(key) for key in _SECTIONS}
    config = msgspec.structs.replace(top, routes=routes, front_sections=sections, **core)
    secret_refs(config)  # a plugin's `secrets` that raises is a problem of this file, found now
    return config


def secret_refs(config: Config) -> list[registry.SecretRefs]:
    """Where every secret of `config` is: each route's back, `acp_auth` and front
    settings (FrontKind.route_secrets), each front's section. Their values are
    registered for log redaction (bridge/reload.py). Raises ConfigError listing each
    plugin whose `secrets` raised."""
    refs: list[registry.SecretRefs] = []
    problems: list[str] = []
    fronts = config.protocols.fronts.values()
    calls: list[tuple[Any, Any]] = []
    for route in config.routes.values():
        calls.append((registry.back_kind_of(route.back).secrets, route.back))
        calls += [(f.route_secrets, route.front_settings[f.key]) for f in fronts if f.key in route.front_settings]
        if route.acp_auth is not None:
            refs.append(registry.SecretRefs(envs=(route.acp_auth.token_env,)))
        if route.oauth is not None:
            refs.append(registry.SecretRefs(envs=route.oauth.envs, files=route.oauth.files))
    calls += [(f.secrets, config.front_sections[f.key]) for f in fronts if f.key in config.front_sections]
    for secrets, settings in calls:
        if secrets is None:
            continue
        try:
            refs.append(secrets(settings))
        except ConfigError as exc:  # a plugin's (bridge/registry.py, `_guard`)
            problems += [p for p in exc.problems if p not in problems]
    if problems:
        raise ConfigError(problems)
    return refs


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


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None, listen: str | None = None
) -> Config:
    """Read and validate a TOML file (None: the embedded demo configuration), with the
    overrides of `environ` (default: ours) and `listen` (`serve --listen`) applied
    (bridge/config_env.py). Each problem says its line, or the variable that set it."""
    from bridge.config_env import apply_overrides, locate, overrides_from, toml_error_line

    file = Path(path) if path is not None else default_config_path()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{file}: cannot read: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{file}: not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: not valid TOML: {exc}", line=toml_error_line(exc, text))]) from exc
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError([f"{file}: not valid TOML: arrays or inline tables nested too deeply"]) from None
    wanted, problems = overrides_from(os.environ if environ is None else environ, listen=listen)
    applied, more = apply_overrides(raw, wanted)
    try:
        config = parse_config(raw)
    except ConfigError as exc:
        raise ConfigError(locate([*problems, *more, *exc.problems], text, applied)) from exc
    if problems or more:
        raise ConfigError(locate([*problems, *more], text, applied))
    return config


def default_config_path() -> Path:
    """The embedded demo config: packaged beside this module, or in the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "demo.toml", here.parent / "configs" / "demo.toml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(["the embedded demo configuration is missing from this installation"])
