"""The protocol registry: which backs and fronts exist, and where each one's code is.

A back package declares a `BackKind` (its `kind` in `[routes.NAME.back]`, its config
Struct, a factory, the secrets its config points at); a front package declares a
`FrontKind` (its name, used as the `[name]` config section and the metric label, the
Struct of that section, and how it registers its routes on the daemon's listener).

Built-in protocols are the subpackages of `bridge.backs` and `bridge.fronts`, each
`__init__.py` declaring `BACK = BackKind(...)` or `FRONT = FrontKind(...)`. A
third-party protocol is a module named in the config's top-level `plugins = [...]`,
declaring `BACK`, `FRONT`, or lists `BACKS` / `FRONTS`. Declarations stay light: a
factory or `register` imports its implementation when it is called, so that loading
the registry costs a few small modules (`agent-bridge acp` starts fast).

This module imports nothing of the bridge's layers: it finds the packages by name at
run time (`importlib.import_module`).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any

import msgspec

from bridge.errors import ConfigError

__all__ = ["BackKind", "FrontKind", "Protocols", "SecretRefs", "back_kind_of", "builtin", "load"]

# Looked up at run time: the registry sits below the layers it lists.
_BUILTIN_PACKAGES: tuple[str, ...] = ("bridge.backs", "bridge.fronts")
# Top-level config keys that are not front sections (bridge/config.py, `Config`).
_RESERVED_SECTIONS = frozenset(
    {"routes", "default_route", "server", "store", "daemon", "prompts", "prompt_sources", "log_level", "plugins", "front_sections"}
)


class SecretRefs(msgspec.Struct, frozen=True, kw_only=True):
    """Where a config's secrets are: environment variable names, files (a relative one
    is looked up in $CREDENTIALS_DIRECTORY under systemd), and literal values. Every
    value found is registered for log redaction (bridge/reload.py)."""

    envs: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    values: tuple[str, ...] = ()


class BackKind(msgspec.Struct, frozen=True, kw_only=True):
    """A back: what runs a route's turns."""

    kind: str  # `kind = "..."` in [routes.NAME.back]
    config: type  # a msgspec Struct with tag=kind, tag_field="kind"
    factory: Callable[[str, Any], Any]  # (route name, Route) -> Back; imports its code when called
    secrets: Callable[[Any], SecretRefs] | None = None  # of one config of this kind


class FrontKind(msgspec.Struct, frozen=True, kw_only=True):
    """A front: where clients connect."""

    name: str  # the events-relayed metric label (a Subscriber's `protocol`), and by default its section
    config: type | None = None  # the Struct of its config section (its defaults when absent)
    # Adds its routes to the daemon's HTTP listener: (HttpApp, Config, SessionManager).
    register: Callable[[Any, Any, Any], None] | None = None
    # `[routes.NAME.<name>]`: the route as this front shows it (its defaults when absent).
    route_config: type | None = None
    # The `front` label of agent_bridge_open_connections for its own connections, if it
    # counts them apart from the listener's HTTP requests (bridge/metrics.py).
    connections: str | None = None
    secrets: Callable[[Any], SecretRefs] | None = None  # of its `[name]` section
    # Problems its decoded section has with the routes (one naming a route that is not
    # there): (section, route names) -> ["$.path: why", ...].
    check: Callable[[Any, Collection[str]], list[str]] | None = None
    # False: a change to its section is kept for the next restart on SIGHUP (bridge/reload.py).
    reloadable: bool = True
    # The config section's key when it is not `name` (the chat front's is `[ws]`).
    section: str = ""

    @property
    def key(self) -> str:
        """Its top-level config key, `[key]` (and `[routes.NAME.key]`)."""
        return self.section or self.name


class Protocols:
    """The backs and fronts one configuration can use: the built-ins plus its plugins."""

    __slots__ = ("back_union", "backs", "fronts")

    def __init__(self, backs: Mapping[str, BackKind], fronts: Mapping[str, FrontKind]) -> None:
        self.backs = backs
        self.fronts = fronts
        configs = [k.config for k in backs.values()]
        # The route `back` type msgspec decodes: a union of `kind`-tagged Structs.
        self.back_union: Any = functools.reduce(lambda a, b: a | b, configs) if configs else None


# Every BackKind ever loaded in this process, by its config Struct (for make_back).
_BY_CONFIG: dict[type, BackKind] = {}


def back_kind_of(config: object) -> BackKind:
    """The BackKind whose config Struct `config` is (loaded by `builtin` or `load`)."""
    try:
        return _BY_CONFIG[type(config)]
    except KeyError:
        raise LookupError(f"no back declares the config type {type(config).__qualname__}") from None


def _declared(module: ModuleType) -> tuple[list[BackKind], list[FrontKind]]:
    backs = list(getattr(module, "BACKS", ()))
    fronts = list(getattr(module, "FRONTS", ()))
    if getattr(module, "BACK", None) is not None:
        backs.append(module.BACK)
    if getattr(module, "FRONT", None) is not None:
        fronts.append(module.FRONT)
    for item in backs:
        if not isinstance(item, BackKind):
            raise TypeError(f"module {module.__name__!r}: {item!r} is not a BackKind")
    for item in fronts:
        if not isinstance(item, FrontKind):
            raise TypeError(f"module {module.__name__!r}: {item!r} is not a FrontKind")
    return backs, fronts


def _add(
    where: str, module: str, backs: list[BackKind], fronts: list[FrontKind],
    into_backs: dict[str, tuple[str, BackKind]], into_fronts: dict[str, tuple[str, FrontKind]],
) -> list[str]:  # fmt: skip
    problems = []
    for back in backs:
        if back.kind in into_backs:
            problems.append(f"{where}: back kind {back.kind!r} is declared by {into_backs[back.kind][0]!r} and {module!r}")
        else:
            into_backs[back.kind] = (module, back)
    for front in fronts:
        keys = {f.key: owner for owner, f in into_fronts.values()}
        if front.key in _RESERVED_SECTIONS:
            problems.append(f"{where}: front {front.name!r} would take the top-level key {front.key!r}")
        elif front.name in into_fronts:
            problems.append(f"{where}: front {front.name!r} is declared by {into_fronts[front.name][0]!r} and {module!r}")
        elif front.key in keys:
            problems.append(f"{where}: the config section [{front.key}] is declared by {keys[front.key]!r} and {module!r}")
        else:
            into_fronts[front.name] = (module, front)
    return problems


def _protocols(backs: dict[str, tuple[str, BackKind]], fronts: dict[str, tuple[str, FrontKind]]) -> Protocols:
    for _, back in backs.values():
        _BY_CONFIG[back.config] = back
    return Protocols({k: b for k, (_, b) in backs.items()}, {k: f for k, (_, f) in fronts.items()})


@functools.cache
def _builtin_declarations() -> tuple[dict[str, tuple[str, BackKind]], dict[str, tuple[str, FrontKind]]]:
    backs: dict[str, tuple[str, BackKind]] = {}
    fronts: dict[str, tuple[str, FrontKind]] = {}
    for package_name in _BUILTIN_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__, prefix=package_name + "."):
            if not info.ispkg:
                continue  # shared modules (bridge/fronts/http.py, bridge/backs/base.py)
            found_backs, found_fronts = _declared(importlib.import_module(info.name))
            problems = _add(info.name, info.name, found_backs, found_fronts, backs, fronts)
            if problems:
                raise RuntimeError("; ".join(problems))  # our bug, not the operator's
    return backs, fronts


def builtin() -> Protocols:
    """The protocols of `bridge.backs.*` and `bridge.fronts.*`."""
    return load(())


@functools.cache
def _load(plugins: tuple[str, ...]) -> Protocols:
    builtin_backs, builtin_fronts = _builtin_declarations()
    backs, fronts = dict(builtin_backs), dict(builtin_fronts)
    problems: list[str] = []
    for i, name in enumerate(plugins):
        where = f"$.plugins[{i}]"
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            problems.append(f"{where}: cannot import plugin module {name!r}: {exc}")
            continue
        except Exception as exc:  # the plugin's own bug, reported as its config's problem
            problems.append(f"{where}: plugin module {name!r} failed to import: {type(exc).__name__}: {exc}")
            continue
        try:
            found_backs, found_fronts = _declared(module)
        except TypeError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if not found_backs and not found_fronts:
            problems.append(f"{where}: plugin module {name!r} declares no BACK, BACKS, FRONT or FRONTS")
            continue
        problems += _add(where, name, found_backs, found_fronts, backs, fronts)
    if problems:
        raise ConfigError(problems)
    return _protocols(backs, fronts)


def load(plugins: Sequence[str]) -> Protocols:
    """The built-in protocols plus those of the `plugins` modules (imported once each).

    Raises ConfigError (`$.plugins[i]: ...`) for a module that does not import, that
    declares nothing, or that declares a back kind or front name already taken.
    """
    return _load(tuple(plugins))
