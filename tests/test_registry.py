"""The protocol registry refuses malformed plugin declarations as config problems.

A plugin module named in `plugins` (bridge/registry.py) is the operator's config: what
is wrong with it is a `ConfigError` saying `$.plugins[i]: ...` (so `check-config` and
`serve` exit 78 and systemd does not restart-loop), never a traceback while the routes
are read. Each case here builds its plugin module in memory and runs `parse_config`;
tests/test_e2e_plugin.py shows the exit code through the real process.
"""

from __future__ import annotations

import itertools
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import registry
from bridge.backs.demo.config import DemoBackConfig
from bridge.config import Config, ConfigStruct, Route, parse_config
from bridge.errors import ConfigError
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.registry import BackKind, FrontKind, SecretRefs

_names = itertools.count()


class GoodBackConfig(ConfigStruct, tag="good", tag_field="kind"):
    pass


class OtherTagConfig(ConfigStruct, tag="other", tag_field="kind"):
    pass


class TypeTaggedConfig(ConfigStruct, tag="typed", tag_field="type"):
    pass


class UntaggedConfig(ConfigStruct):
    pass


class DemoTaggedConfig(ConfigStruct, tag="demo", tag_field="kind"):
    pass


class SectionConfig(ConfigStruct):
    greeting: str = ""


class NeedsAField(ConfigStruct):
    url: str


def _factory(name: str, route: Any) -> None:
    return None


def plugin(monkeypatch: pytest.MonkeyPatch, **declared: Any) -> str:
    """A plugin module holding `declared` (BACK=..., FRONTS=[...]); its unique name."""
    name = f"registry_test_plugin_{next(_names)}"
    module = types.ModuleType(name)
    for key, value in declared.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def problems_of(plugins: list[str], **raw: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config({"plugins": plugins, "routes": {"demo": {"back": {"kind": "demo"}}}, **raw})
    return info.value.problems


# -- backs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("back", "expected"),
    [
        (
            BackKind(kind="plain", config=dict, factory=_factory),
            "$.plugins[0]: back 'plain': `config` <class 'dict'> is not a msgspec Struct",
        ),
        (
            BackKind(kind="mismatch", config=OtherTagConfig, factory=_factory),
            "$.plugins[0]: back 'mismatch': its config Struct OtherTagConfig is tagged 'other'; it needs tag='mismatch'",
        ),
        (
            BackKind(kind="typed", config=TypeTaggedConfig, factory=_factory),
            "$.plugins[0]: back 'typed': its config Struct TypeTaggedConfig needs tag_field=\"kind\" (it has 'type')",
        ),
        (
            BackKind(kind="untagged", config=UntaggedConfig, factory=_factory),
            "$.plugins[0]: back 'untagged': its config Struct UntaggedConfig needs tag_field=\"kind\" (it has None)",
        ),
        (
            # A built-in's own Struct under another kind: two kinds, one tag.
            BackKind(kind="mine", config=DemoBackConfig, factory=_factory),
            "$.plugins[0]: back 'mine': its config Struct DemoBackConfig is already the config of back 'demo'",
        ),
        (
            # A Struct of its own that takes a built-in's tag.
            BackKind(kind="sneaky", config=DemoTaggedConfig, factory=_factory),
            "$.plugins[0]: back 'sneaky': its config Struct DemoTaggedConfig is tagged 'demo'; it needs tag='sneaky'",
        ),
        (
            BackKind(kind="demo", config=DemoTaggedConfig, factory=_factory),
            "$.plugins[0]: back kind 'demo' is declared by 'bridge.backs.demo' and '{module}'",
        ),
        (
            BackKind(kind="", config=GoodBackConfig, factory=_factory),
            "$.plugins[0]: back kind '' is not a name (a letter, then letters, digits, '_', '-')",
        ),
        (
            BackKind(kind="good", config=GoodBackConfig, factory="not a function"),  # type: ignore[arg-type]
            "$.plugins[0]: back 'good': `factory` is not callable",
        ),
    ],
)
def test_a_malformed_back_is_a_config_error(monkeypatch: pytest.MonkeyPatch, back: BackKind, expected: str) -> None:
    name = plugin(monkeypatch, BACK=back)
    assert problems_of([name]) == [expected.format(module=name)]


def test_every_malformed_declaration_of_a_plugin_is_reported_and_the_sound_ones_load(monkeypatch: pytest.MonkeyPatch) -> None:
    name = plugin(
        monkeypatch,
        BACKS=[BackKind(kind="plain", config=dict, factory=_factory), BackKind(kind="good", config=GoodBackConfig, factory=_factory)],
        FRONTS=[FrontKind(name="back")],
    )
    assert problems_of([name]) == [
        f"$.plugins[0]: back 'plain': `config` {dict!r} is not a msgspec Struct",
        "$.plugins[0]: front 'back' would take the route key 'back' ([routes.NAME.back] is the route's own)",
    ]


def test_a_sound_plugin_back_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks let a well-formed declaration through (the union of tagged Structs)."""
    name = plugin(monkeypatch, BACK=BackKind(kind="good", config=GoodBackConfig, factory=_factory))
    config = parse_config({"plugins": [name], "routes": {"g": {"back": {"kind": "good"}}}})
    assert type(config.routes["g"].back) is GoodBackConfig


# -- fronts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        (FrontKind(name="back"), "front 'back' would take the route key 'back' ([routes.NAME.back] is the route's own)"),
        (FrontKind(name="title"), "front 'title' would take the route key 'title' ([routes.NAME.title] is the route's own)"),
        (FrontKind(name="routes"), "front 'routes' would take the top-level key 'routes'"),
        (FrontKind(name="mine", section="server"), "front 'mine' would take the top-level key 'server'"),
        (FrontKind(name="mine", section="ws"), "the config section [ws] is declared by 'bridge.fronts.chat' and '{module}'"),
        (FrontKind(name="a2a"), "front 'a2a' is declared by 'bridge.fronts.a2a' and '{module}'"),
        (FrontKind(name="mine", config=dict), f"front 'mine': `config` {dict!r} is not a msgspec Struct"),
        (FrontKind(name="mine", route_config=dict), f"front 'mine': `route_config` {dict!r} is not a msgspec Struct"),
        (
            FrontKind(name="mine", config=NeedsAField),
            "front 'mine': `config` NeedsAField cannot be built with no settings (its defaults): "
            "TypeError: Missing required argument 'url'",
        ),
        (FrontKind(name="mine", config=A2AFrontConfig), "front 'mine': `config` A2AFrontConfig is already a Struct of front 'a2a'"),
        (FrontKind(name="mine", check=42), "front 'mine': `check` is not callable"),  # type: ignore[arg-type]
        (FrontKind(name="no spaces"), "front name 'no spaces' is not a name (a letter, then letters, digits, '_', '-')"),
    ],
)
def test_a_malformed_front_is_a_config_error(monkeypatch: pytest.MonkeyPatch, front: FrontKind, expected: str) -> None:
    name = plugin(monkeypatch, FRONT=front)
    assert problems_of([name]) == ["$.plugins[0]: " + expected.format(module=name)]


def test_the_reserved_keys_are_those_of_config_and_route() -> None:
    """The registry cannot import bridge/config.py (it is below it): its lists of the
    keys a front may not take are kept in step here."""
    assert registry._RESERVED_SECTIONS == set(Config.__struct_fields__)
    assert registry._RESERVED_ROUTE_KEYS == set(Route.__struct_fields__)


# -- modules -------------------------------------------------------------------------------


def test_declarations_that_are_not_lists_or_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    a = plugin(monkeypatch, BACKS=42)
    b = plugin(monkeypatch, FRONT="a2a")
    assert problems_of([a, b]) == [
        f"$.plugins[0]: module {a!r}: BACKS is not a list",
        f"$.plugins[1]: module {b!r}: 'a2a' is not a FrontKind",
    ]


def _module_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"registry_test_file_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_plugin_that_exits_at_import_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sys.exit(0)` at import would make `check-config` exit 0 with nothing said."""
    name = _module_file(tmp_path, monkeypatch, "import sys\nsys.exit(0)\n")
    assert problems_of([name]) == [f"$.plugins[0]: plugin module {name!r} failed to import: SystemExit: 0"]
    name = _module_file(tmp_path, monkeypatch, "raise RuntimeError('boom')\n")
    assert problems_of([name]) == [f"$.plugins[0]: plugin module {name!r} failed to import: RuntimeError: boom"]


def test_ctrl_c_and_cancellation_are_never_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module_file(tmp_path, monkeypatch, "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        parse_config({"plugins": [name], "routes": {"demo": {"back": {"kind": "demo"}}}})
    assert registry._must_propagate(trio.Cancelled._create())
    assert registry._must_propagate(BaseExceptionGroup("g", [ValueError(), KeyboardInterrupt()]))
    assert not registry._must_propagate(SystemExit(0))


# -- a plugin's callables ------------------------------------------------------------------


def _raises(*args: Any) -> Any:
    raise RuntimeError("the plugin's bug")


def _section_plugin(monkeypatch: pytest.MonkeyPatch, **hooks: Callable[..., Any]) -> str:
    return plugin(monkeypatch, FRONT=FrontKind(name="mine", config=SectionConfig, **hooks))


@pytest.mark.parametrize(
    ("hooks", "expected"),
    [
        ({"check": _raises}, "front 'mine' `check` raised RuntimeError: the plugin's bug"),
        ({"check": lambda section, routes: None}, "front 'mine' `check` returned NoneType, not a list of str"),
        ({"secrets": _raises}, "front 'mine' `secrets` raised RuntimeError: the plugin's bug"),
        ({"secrets": lambda section: ["X"]}, "front 'mine' `secrets` returned list, not SecretRefs"),
    ],
)
def test_a_raising_front_callable_is_a_config_error_naming_the_plugin(
    monkeypatch: pytest.MonkeyPatch, hooks: dict[str, Callable[..., Any]], expected: str
) -> None:
    name = _section_plugin(monkeypatch, **hooks)
    assert problems_of([name]) == [f"$.plugins[0]: plugin {name!r}: {expected}"]


def test_a_raising_route_secrets_is_a_config_error_naming_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    name = plugin(monkeypatch, FRONT=FrontKind(name="mine", route_config=SectionConfig, route_secrets=_raises))
    assert problems_of([name]) == [f"$.plugins[0]: plugin {name!r}: front 'mine' `route_secrets` raised RuntimeError: the plugin's bug"]


class RaisingSecretsConfig(ConfigStruct, tag="raising", tag_field="kind"):
    pass


def test_a_raising_back_secrets_is_a_config_error_naming_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    name = plugin(monkeypatch, BACK=BackKind(kind="raising", config=RaisingSecretsConfig, factory=_factory, secrets=_raises))
    with pytest.raises(ConfigError) as info:
        parse_config({"plugins": [name], "routes": {"r1": {"back": {"kind": "raising"}}, "r2": {"back": {"kind": "raising"}}}})
    # Once, however many routes use it.
    assert info.value.problems == [f"$.plugins[0]: plugin {name!r}: back 'raising' `secrets` raised RuntimeError: the plugin's bug"]


def test_a_plugins_sound_callables_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _section_plugin(
        monkeypatch, check=lambda section, routes: [], secrets=lambda section: SecretRefs(values=("s3cret-value",))
    )
    config = parse_config({"plugins": [name], "routes": {"demo": {"back": {"kind": "demo"}}}, "mine": {"greeting": "hi"}})
    assert config.section(SectionConfig).greeting == "hi"
    front = config.protocols.fronts["mine"]
    assert front.secrets is not None and front.secrets(config.section(SectionConfig)).values == ("s3cret-value",)
