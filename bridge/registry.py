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

Every declaration is checked when it is loaded, so that a malformed plugin is a
`ConfigError` (`$.plugins[i]: ...`; `check-config` and `serve` exit 78, systemd does
not restart-loop on it) and never a traceback while the routes are read: a back's
`config` must be a Struct tagged with its `kind` on the field "kind"; a front's key
must not be a top-level config key nor a route's own key, and its Structs must build
with no settings. A plugin's `check`, `secrets` and `route_secrets` are wrapped: one
that raises, or returns the wrong type, is a ConfigError naming the plugin.

This module imports nothing of the bridge's layers: it finds the packages by name at
run time (`importlib.import_module`).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any

import msgspec

from bridge.errors import ConfigError

__all__ = ["BackKind", "FrontKind", "Protocols", "SecretRefs", "back_kind_of", "builtin", "load"]

# Looked up at run time: the registry sits below the layers it lists.
_BUILTIN_PACKAGES: tuple[str, ...] = ("bridge.backs", "bridge.fronts")
# Top-level config keys that are not front sections (the fields of bridge/config.py
# `Config`), and a route's own keys (of `Route`): a front's key may be none of them
# (`[KEY]` and `[routes.NAME.KEY]`). tests/test_registry.py keeps them in step.
_RESERVED_SECTIONS = frozenset(
    {"routes", "default_route", "server", "store", "daemon", "cluster", "telemetry", "prompts", "prompt_sources", "log_level", "plugins",
     "front_sections", "limits", "auth"}
)
_RESERVED_ROUTE_KEYS = frozenset(
    {
        "back", "title", "description", "version", "options", "acp_auth", "question_timeout_s", "cancel_grace_s",
        "turn_timeout_s", "turn_idle_timeout_s", "max_live_sessions", "prompts", "prompt_sources", "shared_prompts",
        "front_settings", "oauth", "limits", "access",
    }
)  # fmt: skip
# A back's kind and a front's name and key: a TOML bare key, a metric label.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


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
    # Of one route's `[routes.NAME.<name>]` settings (`route_config`): an A2A route's token.
    route_secrets: Callable[[Any], SecretRefs] | None = None
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
    lists = {name: getattr(module, name, ()) for name in ("BACKS", "FRONTS")}
    for name, value in lists.items():
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"module {module.__name__!r}: {name} is not a list")
    backs, fronts = list(lists["BACKS"]), list(lists["FRONTS"])
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


def _must_propagate(exc: BaseException) -> bool:
    """Ctrl-C and trio's cancellation are never a plugin's problem to report: they go on
    (STYLE.md rule 16). trio is looked up, not imported: the registry does no I/O."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    trio = sys.modules.get("trio")
    if trio is not None and isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_must_propagate(e) for e in exc.exceptions)
    return False


def _is_struct(typ: object) -> bool:
    return isinstance(typ, type) and issubclass(typ, msgspec.Struct)


def _builds_empty(typ: type) -> str | None:
    """Why `typ()` fails (a section or route table absent from the config is its defaults)."""
    try:
        typ()
    except BaseException as exc:
        if _must_propagate(exc):
            raise
        return f"{type(exc).__name__}: {exc}"
    return None


def _callables(decl: BackKind | FrontKind, names: tuple[str, ...]) -> list[str]:
    return [f"`{n}` is not callable" for n in names if getattr(decl, n) is not None and not callable(getattr(decl, n))]


def _back_problems(back: BackKind, taken: Mapping[type, str]) -> list[str]:
    if not isinstance(back.kind, str) or not _NAME.match(back.kind):
        return [f"back kind {back.kind!r} is not a name (a letter, then letters, digits, '_', '-')"]
    what = f"back {back.kind!r}"
    problems = [f"{what}: {p}" for p in _callables(back, ("secrets",))]
    if not callable(back.factory):
        problems.append(f"{what}: `factory` is not callable")
    if not _is_struct(back.config):
        return [*problems, f"{what}: `config` {back.config!r} is not a msgspec Struct"]
    name = back.config.__qualname__
    struct = back.config.__struct_config__
    if back.config in taken:
        problems.append(f"{what}: its config Struct {name} is already the config of back {taken[back.config]!r}")
    elif struct.tag_field != "kind":
        problems.append(f'{what}: its config Struct {name} needs tag_field="kind" (it has {struct.tag_field!r})')
    elif struct.tag != back.kind:
        problems.append(f"{what}: its config Struct {name} is tagged {struct.tag!r}; it needs tag={back.kind!r}")
    return problems


def _front_problems(front: FrontKind, taken: Mapping[type, str]) -> list[str]:
    if not isinstance(front.name, str) or not _NAME.match(front.name):
        return [f"front name {front.name!r} is not a name (a letter, then letters, digits, '_', '-')"]
    what = f"front {front.name!r}"
    if not isinstance(front.section, str) or (front.section and not _NAME.match(front.section)):
        return [f"{what}: `section` {front.section!r} is not a name"]
    problems = [f"{what}: {p}" for p in _callables(front, ("register", "secrets", "route_secrets", "check"))]
    if front.key in _RESERVED_SECTIONS:
        problems.append(f"{what} would take the top-level key {front.key!r}")
    if front.key in _RESERVED_ROUTE_KEYS:
        problems.append(f"{what} would take the route key {front.key!r} ([routes.NAME.{front.key}] is the route's own)")
    for field in ("config", "route_config"):
        typ = getattr(front, field)
        if typ is None:
            continue
        if not _is_struct(typ):
            problems.append(f"{what}: `{field}` {typ!r} is not a msgspec Struct")
        elif typ in taken:
            problems.append(f"{what}: `{field}` {typ.__qualname__} is already a Struct of front {taken[typ]!r}")
        elif (why := _builds_empty(typ)) is not None:
            problems.append(f"{what}: `{field}` {typ.__qualname__} cannot be built with no settings (its defaults): {why}")
    return problems


def _guard(fn: Callable[..., Any], where: str, what: str, returns: type, expected: str) -> Callable[..., Any]:
    """A plugin's callable whose failure is the operator's config problem naming the
    plugin, not a traceback that stops the daemon."""

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        try:
            result = fn(*args)
        except BaseException as exc:
            if _must_propagate(exc):
                raise
            raise ConfigError([f"{where}: {what} raised {type(exc).__name__}: {exc}"]) from exc
        if not isinstance(result, returns) or (returns is list and not all(isinstance(p, str) for p in result)):
            raise ConfigError([f"{where}: {what} returned {type(result).__name__}, not {expected}"])
        return result

    return call


def _guarded_back(back: BackKind, where: str, module: str) -> BackKind:
    if back.secrets is None:
        return back
    what = f"plugin {module!r}: back {back.kind!r} `secrets`"
    return msgspec.structs.replace(back, secrets=_guard(back.secrets, where, what, SecretRefs, "SecretRefs"))


def _guarded_front(front: FrontKind, where: str, module: str) -> FrontKind:
    changes: dict[str, Any] = {}
    for field, returns, expected in (("secrets", SecretRefs, "SecretRefs"), ("route_secrets", SecretRefs, "SecretRefs"), ("check", list, "a list of str")):
        fn = getattr(front, field)
        if fn is not None:
            changes[field] = _guard(fn, where, f"plugin {module!r}: front {front.name!r} `{field}`", returns, expected)
    return msgspec.structs.replace(front, **changes) if changes else front


def _add(
    where: str, module: str, backs: list[BackKind], fronts: list[FrontKind],
    into_backs: dict[str, tuple[str, BackKind]], into_fronts: dict[str, tuple[str, FrontKind]],
    *, plugin: bool = False,
) -> list[str]:  # fmt: skip
    """Check each declaration and add the sound ones; `$.plugins[i]: why` for the others.
    A plugin's callables are guarded (`_guard`)."""
    problems = []
    back_configs = {b.config: kind for kind, (_, b) in into_backs.items()}
    for back in backs:
        if isinstance(back.kind, str) and back.kind in into_backs:
            problems.append(f"{where}: back kind {back.kind!r} is declared by {into_backs[back.kind][0]!r} and {module!r}")
            continue
        found = _back_problems(back, back_configs)
        if found:
            problems += [f"{where}: {p}" for p in found]
            continue
        into_backs[back.kind] = (module, _guarded_back(back, where, module) if plugin else back)
        back_configs[back.config] = back.kind
    for front in fronts:
        front_structs = {t: f.name for _, f in into_fronts.values() for t in (f.config, f.route_config) if t is not None}
        keys = {f.key: owner for owner, f in into_fronts.values()}
        if isinstance(front.name, str) and front.name in into_fronts:
            problems.append(f"{where}: front {front.name!r} is declared by {into_fronts[front.name][0]!r} and {module!r}")
            continue
        found = _front_problems(front, front_structs)
        if not found and front.key in keys:
            found = [f"the config section [{front.key}] is declared by {keys[front.key]!r} and {module!r}"]
        if found:
            problems += [f"{where}: {p}" for p in found]
            continue
        into_fronts[front.name] = (module, _guarded_front(front, where, module) if plugin else front)
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
        except BaseException as exc:  # the plugin's own bug (`sys.exit()` too), reported as its config's problem
            if _must_propagate(exc):
                raise
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
        problems += _add(where, name, found_backs, found_fronts, backs, fronts, plugin=True)
    if problems:
        raise ConfigError(problems)
    protocols = _protocols(backs, fronts)
    try:
        msgspec.json.Decoder(protocols.back_union)  # the union `[routes.NAME.back]` is decoded with
    except TypeError as exc:  # every Struct was checked; this is the last word on their union
        raise ConfigError([f"$.plugins: the back config Structs cannot be decoded together: {exc}"]) from exc
    return protocols


def load(plugins: Sequence[str]) -> Protocols:
    """The built-in protocols plus those of the `plugins` modules (imported once each).

    Raises ConfigError (`$.plugins[i]: ...`) for a module that does not import, that
    declares nothing, or that declares a back kind or front name already taken.
    """
    return _load(tuple(plugins))
