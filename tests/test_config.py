"""Configuration: the embedded demo, `$.path` problems, every problem at once, the
`check-config` command (exit 78 = EX_CONFIG), and `configs/example.toml`."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from bridge.backs.demo.config import DemoBackConfig as DemoBack
from bridge import registry
from bridge.config import Config, Route, default_config_path, load_config, parse_config
from bridge.fronts.acp.config import AcpFrontConfig
from bridge.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "configs" / "example.toml"
EX_CONFIG = 78


def demo_route(**kw: Any) -> dict[str, Any]:
    return {"back": {"kind": "demo"}, **kw}


def problems_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.problems, "a ConfigError must say what is wrong"
    assert info.value.message == "; ".join(info.value.problems)
    return info.value.problems


# -- the embedded demo ------------------------------------------------------------------


def test_embedded_demo_config_loads() -> None:
    path = default_config_path()
    assert path.name == "demo.toml" and path.is_file()
    config = load_config()
    assert config == load_config(path)
    assert config.default_route == "demo"
    route = config.routes["demo"]
    assert isinstance(route.back, DemoBack)
    assert [o.id for o in route.options] == ["mode"]
    assert route.options[0].default == "code" and route.options[0].category == "mode"
    # Defaults are filled in.
    assert route.question_timeout_s == 300.0 and route.cancel_grace_s == 5.0 and route.turn_timeout_s is None
    assert config.section(AcpFrontConfig).max_frame_bytes == 8 * 1024 * 1024
    assert config.log_level == "info"


def test_config_is_frozen() -> None:
    config = load_config()
    with pytest.raises(AttributeError):
        config.log_level = "debug"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        config.routes["demo"].cancel_grace_s = 1  # type: ignore[misc]


def test_minimal_config_from_a_dict() -> None:
    config = parse_config({"routes": {"r": demo_route()}})
    assert isinstance(config, Config)
    assert list(config.routes) == ["r"] and config.default_route is None


# -- one problem at a time, each with its $.path ---------------------------------------

OPTION = {"id": "mode", "name": "Mode", "values": [{"value": "a", "name": "A"}]}


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"routes": {"r": demo_route()}, "bogus": 1}, "$.bogus"),
        ({"routes": {"r": demo_route(tiemout_s=3)}}, "$.routes.r.tiemout_s"),
        ({"routes": {"r": {"back": {"kind": "demo", "speed": 2}}}}, "$.routes.r.back.speed"),
        ({"routes": {"r": demo_route(options=[{**OPTION, "colour": "red"}])}}, "$.routes.r.options[0].colour"),
        (
            {"routes": {"r": demo_route(options=[OPTION, {**OPTION, "id": "m2", "values": [{"value": "v", "name": "V", "x": 1}]}])}},
            "$.routes.r.options[1].values[0].x",
        ),
        ({"routes": {"r": demo_route(acp_auth={"token_env": "T", "token": "s3cret"})}}, "$.routes.r.acp_auth.token"),
        ({"routes": {"r": demo_route()}, "acp": {"max_frame": 1}}, "$.acp.max_frame"),
        ({"routes": {"r": demo_route()}, "server": {"port": 1}}, "$.server.port"),
        ({"routes": {"r": demo_route()}, "store": {"path": "/x"}}, "$.store.path"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unknown_keys_are_rejected_at_every_level(raw: dict[str, Any], path: str) -> None:
    assert problems_of(raw) == [f"{path}: unknown key"]


def test_unknown_key_error_does_not_echo_its_value() -> None:
    # Secrets never appear in errors (STYLE.md rule 21): a misplaced token stays unprinted.
    (problem,) = problems_of({"routes": {"r": demo_route(acp_auth={"token_env": "T", "token": "s3cret"})}})
    assert "s3cret" not in problem


def test_unknown_back_kind() -> None:
    (problem,) = problems_of({"routes": {"r": {"back": {"kind": "nope"}}}})
    assert problem.startswith("$.routes.r.back.kind: ")
    assert "nope" in problem


def test_missing_back() -> None:
    (problem,) = problems_of({"routes": {"r": {"title": "no back"}}})
    assert problem.startswith("$.routes.r: ")
    assert "back" in problem


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"routes": {"r": demo_route(question_timeout_s="soon")}}, "$.routes.r.question_timeout_s", "Expected `float`, got `str`"),
        ({"routes": {"r": demo_route(cancel_grace_s=0)}}, "$.routes.r.cancel_grace_s", "> 0"),
        ({"routes": {"r": demo_route(turn_timeout_s=-5)}}, "$.routes.r.turn_timeout_s", "> 0"),
        ({"routes": {"r": {"back": {"kind": "demo", "chunk_delay_s": -0.1}}}}, "$.routes.r.back.chunk_delay_s", ">= 0"),
        ({"routes": {"r": demo_route(title=5)}}, "$.routes.r.title", "Expected `str | null`, got `int`"),
        ({"routes": {"r": demo_route(options={"id": "x"})}}, "$.routes.r.options", "Expected `array`"),
        ({"routes": {"r": demo_route(options=[{"id": "m", "name": "M"}])}}, "$.routes.r.options[0]", "values"),
        ({"routes": {"r": demo_route(acp_auth={})}}, "$.routes.r.acp_auth", "token_env"),
        ({"routes": {"r": "demo"}}, "$.routes.r", "Expected `object`, got `str`"),
        ({"routes": {"r": demo_route()}, "log_level": "loud"}, "$.log_level", "loud"),
        ({"routes": {"r": demo_route()}, "default_route": 5}, "$.default_route", "got `int`"),
        ({"routes": {"r": demo_route()}, "acp": {"max_frame_bytes": 10}}, "$.acp.max_frame_bytes", ">= 1024"),
        ({"routes": {"r": demo_route()}, "acp": {"outbox_max_events": "many"}}, "$.acp.outbox_max_events", "Expected `int`"),
        ({"routes": {"r": demo_route()}, "acp": []}, "$.acp", "Expected `object`"),
        ({"routes": {"r": demo_route()}, "store": {"flush_interval_s": 0}}, "$.store.flush_interval_s", "> 0"),
        ({"routes": {"r": demo_route()}, "server": {"listen": "nowhere"}}, "$.server.listen", "HOST:PORT"),
        ({"routes": {"r": demo_route()}, "server": {"listen": "127.0.0.1:99999"}}, "$.server.listen", "HOST:PORT"),
        ({"routes": {"bad name!": demo_route()}}, "$.routes.bad name!", "route names"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("$") else "",
)
def test_bad_values_name_their_path(raw: dict[str, Any], path: str, words: str) -> None:
    (problem,) = problems_of(raw)
    assert problem.startswith(f"{path}: "), problem
    assert words in problem, problem


@pytest.mark.parametrize("raw", [{}, {"routes": {}}, {"log_level": "info"}])
def test_at_least_one_route(raw: dict[str, Any]) -> None:
    assert problems_of(raw) == ["$.routes: at least one route is needed"]


def test_routes_must_be_a_table() -> None:
    assert "$.routes: Expected `table`" in problems_of({"routes": ["demo"]})


def test_option_default_must_be_one_of_its_values() -> None:
    option = {**OPTION, "default": "zzz"}
    assert problems_of({"routes": {"r": demo_route(options=[option])}}) == [
        "$.routes.r.options[0].default: 'zzz' is not one of its values"
    ]


def test_option_ids_unique_and_values_needed() -> None:
    options = [OPTION, {**OPTION, "values": []}]
    assert problems_of({"routes": {"r": demo_route(options=options)}}) == [
        "$.routes.r.options[1].id: duplicate option id 'mode'",
        "$.routes.r.options[1].values: at least one value is needed",
    ]


def test_default_route_must_name_a_route() -> None:
    assert problems_of({"routes": {"r": demo_route()}, "default_route": "nowhere"}) == [
        "$.default_route: no route named 'nowhere'"
    ]


def test_default_route_pointing_at_a_broken_route_is_not_reported_twice() -> None:
    # The route exists (though invalid): only its own problem is reported.
    assert problems_of({"routes": {"r": demo_route(bogus=1)}, "default_route": "r"}) == ["$.routes.r.bogus: unknown key"]


# -- every problem in one go ------------------------------------------------------------

MANY_PROBLEMS = {
    "log_level": "loud",
    "default_route": "nowhere",
    "surprise": True,
    "routes": {
        "a": demo_route(tiemout_s=3),
        "b": {"back": {"kind": "nope"}},
        "c": demo_route(options=[{**OPTION, "default": "zzz"}, OPTION]),
        "good": demo_route(),
    },
    "acp": {"max_frame_bytes": 1},
    "server": {"listen": "no-port"},
    "store": {"flush_interval_s": -1, "extra": 1},
}

MANY_EXPECTED = [
    "$.log_level: ",
    "$.default_route: no route named 'nowhere'",
    "$.surprise: unknown key",
    "$.routes.a.tiemout_s: unknown key",
    "$.routes.b.back.kind: ",
    "$.routes.c.options[0].default: ",
    "$.routes.c.options[1].id: duplicate option id 'mode'",
    "$.acp.max_frame_bytes: ",
    "$.server.listen: ",
    "$.store.flush_interval_s: ",  # every problem of a table, not only msgspec's first
    "$.store.extra: unknown key",
]


def test_several_problems_are_all_reported() -> None:
    problems = problems_of(MANY_PROBLEMS)
    for expected in MANY_EXPECTED:
        assert sum(p.startswith(expected) for p in problems) == 1, (expected, problems)
    assert len(problems) == len(MANY_EXPECTED), problems


def test_several_top_level_problems_do_not_hide_each_other() -> None:
    problems = problems_of({"routes": {"r": demo_route()}, "log_level": 3, "default_route": 4, "x": 1})
    assert sorted(p.split(":")[0] for p in problems) == ["$.default_route", "$.log_level", "$.x"]


# -- files ----------------------------------------------------------------------------

MANY_PROBLEMS_TOML = """\
log_level = "loud"
default_route = "nowhere"
surprise = true

[routes.a]
back = { kind = "demo" }
tiemout_s = 3

[routes.b]
back = { kind = "nope" }

[routes.c]
back = { kind = "demo" }
[[routes.c.options]]
id = "mode"
name = "Mode"
default = "zzz"
values = [{ value = "a", name = "A" }]
[[routes.c.options]]
id = "mode"
name = "Mode"
values = [{ value = "a", name = "A" }]

[routes.good]
back = { kind = "demo" }

[acp]
max_frame_bytes = 1

[server]
listen = "no-port"

[store]
flush_interval_s = -1
extra = 1
"""


def test_load_config_reports_everything_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(MANY_PROBLEMS_TOML, encoding="utf-8")
    assert tomllib.loads(MANY_PROBLEMS_TOML)  # the file itself is valid TOML
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == len(MANY_EXPECTED)


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[routes.demo]\nback = { kind = "demo"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: not valid TOML: ")
    assert "line 2" in problem
    assert isinstance(info.value.__cause__, tomllib.TOMLDecodeError)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.startswith(f"{path}: cannot read")


def test_load_config_accepts_str_paths(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('[routes.x]\nback = { kind = "demo" }\n', encoding="utf-8")
    assert list(load_config(str(path)).routes) == ["x"]


# -- agent-bridge check-config -----------------------------------------------------------


def check_config(bridge_exe: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*bridge_exe, "check-config", str(path)], capture_output=True, text=True, timeout=60)


def test_check_config_prints_every_problem_and_exits_78(bridge_exe: list[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(MANY_PROBLEMS_TOML, encoding="utf-8")
    proc = check_config(bridge_exe, path)
    assert proc.returncode == EX_CONFIG, proc
    *lines, summary = proc.stderr.splitlines()
    assert len(lines) == len(MANY_EXPECTED) and summary == f"{path}: {len(MANY_EXPECTED)} problems", proc.stderr
    for expected in MANY_EXPECTED:  # each with its line: FILE:LINE: $.path: ...
        assert sum(re.match(rf"{re.escape(str(path))}:\d+: {re.escape(expected)}", line) is not None for line in lines) == 1, (expected, proc.stderr)
    assert proc.stdout == ""


def test_check_config_toml_syntax_error_exits_78(bridge_exe: list[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("routes = [\n", encoding="utf-8")
    proc = check_config(bridge_exe, path)
    assert proc.returncode == EX_CONFIG
    assert "not valid TOML" in proc.stderr


def test_check_config_missing_file_exits_78(bridge_exe: list[str], tmp_path: Path) -> None:
    proc = check_config(bridge_exe, tmp_path / "absent.toml")
    assert proc.returncode == EX_CONFIG
    assert "cannot read" in proc.stderr


def test_check_config_good_file_exits_0(bridge_exe: list[str]) -> None:
    proc = check_config(bridge_exe, REPO / "configs" / "demo.toml")
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "demo" in proc.stdout
    assert proc.stderr == ""


# -- configs/example.toml ----------------------------------------------------------------


def test_example_config_passes_validation() -> None:
    config = load_config(EXAMPLE)
    assert config.default_route in config.routes
    assert {"demo", "demo-secured"} <= set(config.routes)


def test_example_config_passes_check_config(bridge_exe: list[str]) -> None:
    proc = check_config(bridge_exe, EXAMPLE)
    assert proc.returncode == 0, proc.stderr


_COMMENTED_SETTING = re.compile(r"^#\s*([a-z_]+\s*=\s*.+)$", re.MULTILINE)


def example_with_commented_settings_enabled() -> dict[str, Any]:
    """The example with its commented-out settings (`# key = value`) switched on."""
    return tomllib.loads(_COMMENTED_SETTING.sub(r"\1", EXAMPLE.read_text(encoding="utf-8")))


def test_example_commented_settings_are_valid_too() -> None:
    raw = example_with_commented_settings_enabled()
    assert "state_dir" in raw["store"]
    parse_config(raw)


def _struct_types(info: mi.Type, out: dict[type, mi.StructType]) -> None:
    if isinstance(info, mi.StructType):
        if info.cls not in out:
            out[info.cls] = info
            for f in info.fields:
                _struct_types(f.type, out)
    elif isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        _struct_types(info.item_type, out)
    elif isinstance(info, mi.DictType):
        _struct_types(info.value_type, out)
    elif isinstance(info, mi.UnionType):
        for t in info.types:
            _struct_types(t, out)


def _keys_used(value: Any, info: mi.Type, seen: dict[type, set[str]]) -> None:
    if isinstance(info, mi.StructType) and isinstance(value, dict):
        seen.setdefault(info.cls, set()).update(value)
        for f in info.fields:
            if f.encode_name in value:
                _keys_used(value[f.encode_name], f.type, seen)
    elif isinstance(info, mi.ListType) and isinstance(value, list):
        for item in value:
            _keys_used(item, info.item_type, seen)
    elif isinstance(info, mi.DictType) and isinstance(value, dict):
        for item in value.values():
            _keys_used(item, info.value_type, seen)
    elif isinstance(info, mi.UnionType):
        for t in info.types:
            _keys_used(value, t, seen)


def _schema() -> type:
    """Config as decoded with the built-in protocols: each route's `back` the union of
    the back Structs, each front's section and route table a field (bridge/registry.py)."""
    protocols = registry.builtin()
    fronts = list(protocols.fronts.values())
    route = msgspec.defstruct(
        "Route",
        [("back", protocols.back_union), *((f.key, f.route_config, None) for f in fronts if f.route_config)],
        bases=(Route,),
    )
    return msgspec.defstruct(
        "Config", [("routes", dict[str, route]), *((f.key, f.config, None) for f in fronts if f.config)], bases=(Config,)
    )


_DERIVED = {"front_sections", "front_settings"}  # filled by parse_config, never written


def test_example_shows_every_option() -> None:
    """Every field of every config Struct appears in the example (commented or not)."""
    root = mi.type_info(_schema())
    structs: dict[type, mi.StructType] = {}
    _struct_types(root, structs)
    seen: dict[type, set[str]] = {}
    _keys_used(example_with_commented_settings_enabled(), root, seen)
    missing = {
        cls.__name__: sorted({f.encode_name for f in info.fields} - seen.get(cls, set()) - _DERIVED)
        for cls, info in structs.items()
    }
    assert {k: v for k, v in missing.items() if v} == {}


def test_every_example_setting_has_a_comment() -> None:
    """Each setting has a comment on its line or above its group of settings/headers."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    setting = re.compile(r"^(?:[a-z_]+\s*=|\[|\{|\]|\s+\{)")
    unexplained = []
    for i, line in enumerate(lines):
        if not re.match(r"^[a-z_]+\s*=", line) or "#" in line:
            continue
        j = i - 1
        while j >= 0 and setting.match(lines[j]) and not lines[j].lstrip().startswith("#"):
            j -= 1
        if j < 0 or not lines[j].lstrip().startswith("#"):
            unexplained.append(line)
    assert unexplained == []


def test_example_decodes_to_non_default_values_where_it_says_so() -> None:
    config = load_config(EXAMPLE)
    demo = config.routes["demo"]
    assert demo.turn_timeout_s == 3600
    assert [o.id for o in demo.options] == ["mode", "model"]
    secured = config.routes["demo-secured"]
    assert secured.acp_auth is not None and secured.acp_auth.token_env == "AGENT_BRIDGE_DEMO_TOKEN"
    assert msgspec.structs.asdict(config.section(AcpFrontConfig)) == {
        "max_frame_bytes": 8 * 1024 * 1024,
        "outbox_max_events": 8192,
        "request_timeout_s": 600.0,
    }
