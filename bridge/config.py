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

__all__ = [
    "AcpAuth",
    "AcpFrontConfig",
    "BackConfig",
    "Config",
    "DemoBack",
    "OptionValue",
    "Route",
    "RouteOption",
    "ServerConfig",
    "StoreConfig",
    "default_config_path",
    "listen_address",
    "load_config",
    "parse_config",
]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class _Conf(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    pass


class DemoBack(_Conf, tag="demo", tag_field="kind"):
    """The built-in scripted agent (README: "The demo agent")."""

    chunk_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.02
    slow_duration_s: PositiveSeconds = 5.0


BackConfig = DemoBack


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


class Route(_Conf):
    back: BackConfig
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


class StoreConfig(_Conf):
    state_dir: str | None = None  # default: $XDG_STATE_HOME/agent-bridge
    flush_interval_s: PositiveSeconds = 0.05


class Config(_Conf):
    routes: dict[str, Route]
    default_route: str | None = None
    acp: AcpFrontConfig = AcpFrontConfig()
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    def route(self, name: str) -> Route:
        return self.routes[name]


_SECTIONS: dict[str, Any] = {"acp": AcpFrontConfig, "server": ServerConfig, "store": StoreConfig}


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
    server = sections.get("server")
    if server is not None and _split_listen(server.listen) is None:
        problems.append(f"$.server.listen: expected HOST:PORT, got {server.listen!r}")
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
