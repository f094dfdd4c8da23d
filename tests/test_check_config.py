"""`agent-bridge check-config`: every problem of a file in one run, each with its
`$.path`, its line and a hint, as text and as JSON; settings from the environment;
the config file's JSON Schema (`config schema`); `--help` never cut short."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bridge.config import load_config
from bridge.config_schema import SHIPPED_SCHEMA, config_schema
from bridge.errors import ConfigError, ConfigProblem

REPO = Path(__file__).resolve().parent.parent
EX_CONFIG = 78

# Several problems in one table (routes.research: a misspelt key beside a bad value
# beside a misspelt back kind) and across tables, each on a known line.
MANY = """\
default_route = "reserch"
log_levl = "info"

[routes.research]
back = { kind = "acpp", command = ["agent"] }
question_timout_s = 30
cancel_grace_s = "five"

[routes.demo]
back = { kind = "demo", chunk_delay_s = -1 }

[server]
listen = "127.0.0.1:8765"
graceful_timeout = 3
max_body_bytes = 12
"""

# (path, line, words of the message, words of the hint)
EXPECTED = [
    ("$.default_route", 1, "no route named 'reserch'", "did you mean 'research'?"),
    ("$.log_levl", 2, "unknown key", "did you mean 'log_level'?"),
    ("$.routes.research.back.kind", 5, "Invalid value 'acpp'", "allowed values: 'a2a', 'acp', 'chat', 'demo'; did you mean 'acp'?"),
    ("$.routes.research.question_timout_s", 6, "unknown key", "did you mean 'question_timeout_s'?"),
    ("$.routes.research.cancel_grace_s", 7, "Expected `float`, got `str`", None),
    ("$.routes.demo.back.chunk_delay_s", 10, ">= 0", None),
    ("$.server.graceful_timeout", 14, "unknown key", "did you mean 'graceful_timeout_s'?"),
    ("$.server.max_body_bytes", 15, ">= 1024", None),
]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_exe(), *args], capture_output=True, text=True, timeout=60, env=env)


def _exe() -> list[str]:
    import sys

    return [str(Path(sys.executable).with_name("agent-bridge"))]


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(MANY, encoding="utf-8")
    return path


def test_load_config_reports_every_problem_with_its_line_and_hint(bad: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(bad, environ={})
    found = {p.path: p for p in map(ConfigProblem.of, info.value.problems)}
    assert len(info.value.problems) == len(EXPECTED), info.value.problems
    for path, line, words, hint in EXPECTED:
        assert path in found, (path, info.value.problems)
        assert found[path].line == line and words in found[path].message and found[path].hint == hint, found[path].__dict__


def test_check_config_text_names_file_line_path_and_hint(bad: Path, clean_env: dict[str, str]) -> None:
    proc = run("check-config", str(bad), env=clean_env)
    assert proc.returncode == EX_CONFIG and proc.stdout == "", proc
    lines = proc.stderr.splitlines()
    assert lines[-1] == f"{bad}: {len(EXPECTED)} problems"
    for (path, line, words, hint), text in zip(EXPECTED, lines, strict=False):  # in the file's order
        assert text.startswith(f"{bad}:{line}: {path}: "), text
        assert words in text and (hint is None or text.endswith(f"; {hint}")), text


def test_check_config_json_lists_every_problem(bad: Path, clean_env: dict[str, str]) -> None:
    proc = run("check-config", "--config", str(bad), "--format", "json", env=clean_env)  # --config, as every command
    assert proc.returncode == EX_CONFIG and proc.stderr == "", proc
    doc = json.loads(proc.stdout)
    assert doc["file"] == str(bad) and doc["ok"] is False
    assert [(p["path"], p["line"]) for p in doc["problems"]] == [(p, line) for p, line, _, _ in EXPECTED]
    for problem, (_, _, words, hint) in zip(doc["problems"], EXPECTED, strict=True):
        assert set(problem) == {"path", "line", "message", "hint"} and words in problem["message"] and problem["hint"] == hint


def test_check_config_good_file_and_config_option(clean_env: dict[str, str]) -> None:
    demo = REPO / "configs" / "demo.toml"
    proc = run("check-config", "--config", str(demo), env=clean_env)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{demo}: ok, 1 route: demo"), proc
    proc = run("check-config", str(demo), "--format", "json", env=clean_env)
    assert json.loads(proc.stdout) == {"file": str(demo), "ok": True, "problems": []}
    proc = run("check-config", str(demo), "--config", str(REPO / "configs" / "example.toml"), env=clean_env)
    assert proc.returncode == 64 and "once" in proc.stderr, proc


def test_a_toml_syntax_error_names_the_file_once_with_its_line(tmp_path: Path, clean_env: dict[str, str]) -> None:
    path = tmp_path / "bad3.toml"
    path.write_text('[routes.demo]\nback = { kind = "demo"\n', encoding="utf-8")
    proc = run("check-config", str(path), env=clean_env)
    assert proc.returncode == EX_CONFIG
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"{path}: not valid TOML: ") and first.count(str(path)) == 1, proc.stderr
    doc = json.loads(run("check-config", str(path), "--format", "json", env=clean_env).stdout)
    (problem,) = doc["problems"]
    assert problem["path"] is None and problem["line"] == 2 and problem["message"].startswith("not valid TOML: ")


def test_toml_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    """tomllib recurses into nested arrays: a file, or an override's value, nested past
    Python's recursion limit raised RecursionError (a traceback at start, a SIGHUP reload
    that raised) instead of a problem found."""
    deep = "[" * 5000
    path = tmp_path / "deep.toml"
    path.write_text(f"log_level = {deep}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(path)
    path.write_text('[routes.demo]\nback = { kind = "demo" }\n', encoding="utf-8")
    # Not a TOML value tomllib can read: a string, as any other (check-config then says
    # whether the key takes one).
    env = {"AGENT_BRIDGE__ROUTES__DEMO__TITLE": "{a=" * 5000, "AGENT_BRIDGE__ROUTES__DEMO__DESCRIPTION": deep}
    route = load_config(path, environ=env).routes["demo"]
    assert (route.title, route.description) == ("{a=" * 5000, deep)
    with pytest.raises(ConfigError, match=r"\$\.log_level.*set by \$AGENT_BRIDGE__LOG_LEVEL"):
        load_config(path, environ={"AGENT_BRIDGE__LOG_LEVEL": deep})


def test_a_misspelt_route_on_the_command_line_gets_the_nearest_one(clean_env: dict[str, str]) -> None:
    proc = run("ask", "--config", str(REPO / "configs" / "example.toml"), "reserch", "hello", env=clean_env)
    assert proc.returncode == 2 and "no route named 'reserch'; did you mean 'research'? routes are: " in proc.stderr, proc


# -- settings from the environment ------------------------------------------------------------


def test_environment_overrides_any_key_and_parses_toml_values(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[routes.Demo]\nback = { kind = "demo" }\n[server]\nlisten = "127.0.0.1:1"\n', encoding="utf-8")
    config = load_config(
        path,
        environ={
            "AGENT_BRIDGE__SERVER__LISTEN": "127.0.0.1:2",
            "AGENT_BRIDGE__ROUTES__DEMO__CANCEL_GRACE_S": "2.5",  # the route as the file spells it
            "AGENT_BRIDGE__SERVER__ALLOWED_ORIGINS": '["https://a.example"]',
            "AGENT_BRIDGE__ROUTES__EXTRA__BACK": '{ kind = "demo" }',  # a route the file lacks
            "AGENT_BRIDGE__ROUTES__DEMO__TITLE": "not [toml",  # not a TOML value: a string
            "AGENT_BRIDGE__LOG_LEVEL": "debug",
            "AGENT_BRIDGE__ROUTES__EXTRA__TITLE": '"t"\nlog_level = "error"',  # two keys: not one value
        },
    )
    assert config.routes["extra"].title == '"t"\nlog_level = "error"' 
    assert config.server.listen == "127.0.0.1:2" and config.routes["Demo"].cancel_grace_s == 2.5
    assert config.server.allowed_origins == ["https://a.example"] and set(config.routes) == {"Demo", "extra"}
    assert config.routes["Demo"].title == "not [toml" and config.log_level == "debug"
    # Precedence: --listen > AGENT_BRIDGE_LISTEN > AGENT_BRIDGE__SERVER__LISTEN > the file.
    both = {"AGENT_BRIDGE__SERVER__LISTEN": "127.0.0.1:2", "AGENT_BRIDGE_LISTEN": "127.0.0.1:3"}
    assert load_config(path, environ=both).server.listen == "127.0.0.1:3"
    assert load_config(path, environ=both, listen="127.0.0.1:4").server.listen == "127.0.0.1:4"


def test_an_unknown_key_or_bad_value_from_the_environment_names_its_variable(tmp_path: Path, clean_env: dict[str, str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[routes.demo]\nback = { kind = "demo" }\n', encoding="utf-8")
    env = {**clean_env, "AGENT_BRIDGE__SERVER__LISTN": "0.0.0.0:1", "AGENT_BRIDGE__ROUTES__DEMO__CANCEL_GRACE_S": "-1", "AGENT_BRIDGE__X____Y": "1"}
    doc = json.loads(run("check-config", str(path), "--format", "json", env=env).stdout)
    by_path = {p["path"]: p for p in doc["problems"]}
    listn = by_path["$.server.listn"]
    assert listn["message"] == "unknown key (set by $AGENT_BRIDGE__SERVER__LISTN)" and listn["hint"] == "did you mean 'listen'?"
    assert listn["line"] is None
    assert "set by $AGENT_BRIDGE__ROUTES__DEMO__CANCEL_GRACE_S" in by_path["$.routes.demo.cancel_grace_s"]["message"]
    assert any("$AGENT_BRIDGE__X____Y: not a config key" in p["message"] for p in doc["problems"]), doc
    proc = run("serve", "--config", str(path), "--listen", "nowhere", env=clean_env)
    assert proc.returncode == EX_CONFIG and "$.server.listen: expected HOST:PORT, got 'nowhere' (set by --listen)" in proc.stderr


# -- the JSON Schema ------------------------------------------------------------------------


def test_the_shipped_schema_is_the_generated_one() -> None:
    assert json.loads(SHIPPED_SCHEMA.read_text(encoding="utf-8")) == config_schema(), (
        "regenerate it: agent-bridge config schema > bridge/config.schema.json"
    )


def test_config_schema_command_prints_it(clean_env: dict[str, str]) -> None:
    proc = run("config", "schema", env=clean_env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == config_schema()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.toml")))
def test_the_shipped_configs_validate_against_the_schema(name: str) -> None:
    validator = jsonschema.Draft202012Validator(config_schema())
    validator.check_schema(validator.schema)
    doc = tomllib.loads((REPO / "configs" / name).read_text(encoding="utf-8"))
    assert list(validator.iter_errors(doc)) == []


def test_a_bad_config_does_not_validate_against_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(config_schema())
    errors = list(validator.iter_errors(tomllib.loads(MANY)))
    messages = " | ".join(e.message for e in errors)
    assert "'question_timout_s' was unexpected" in messages and "'five' is not of type 'number'" in messages, messages
    one: dict[str, Any] = {"routes": {"r": {"back": {"kind": "demo"}}}, "log_level": "loud"}
    assert not validator.is_valid(one) and validator.is_valid({**one, "log_level": "info"})


# -- --help -----------------------------------------------------------------------------------


def test_help_lists_every_command_without_cutting_it_short(clean_env: dict[str, str]) -> None:
    out = run("--help", env=clean_env).stdout
    assert "..." not in out.partition("Commands:")[2], out
    assert "..." not in run("store", "--help", env=clean_env).stdout.partition("Commands:")[2]
    for command in ("acp", "ask", "check-config", "config", "doctor", "mcp", "serve", "store"):
        assert f"\n  {command} " in out, out
    serve = run("serve", "--help", env=clean_env).stdout
    assert "--listen HOST:PORT" in serve and "AGENT_BRIDGE_LISTEN" in serve
    assert "--state-dir" in run("doctor", "--help", env=clean_env).stdout


# -- the walk agrees with msgspec ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bridge import registry  # noqa: E402
from bridge.config import DaemonConfig, Route  # noqa: E402
from bridge.config_check import problems_in  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2), st.sampled_from(["", "x", "acp", "demo", "a2a", "/abs", "0600", "http://h"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["kind", "id", "name", "x"]), inner, max_size=3), max_leaves=8)


def _tables(typ: Any) -> Any:
    import msgspec

    names = [f.encode_name for f in msgspec.structs.fields(typ)] if isinstance(typ, type) else ["kind", "url", "command", "card_url", "token_env"]
    return st.dictionaries(st.sampled_from([*names, "typo_s"]), _VALUES, max_size=5)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_walk_finds_a_problem_exactly_when_msgspec_refuses(data: Any) -> None:
    import msgspec

    typ = data.draw(st.sampled_from([Route, DaemonConfig, registry.load([]).back_union]))
    value = data.draw(_tables(typ) | _VALUES)
    try:
        msgspec.convert(value, typ)
        refused = False
    except msgspec.ValidationError:
        refused = True
    found = problems_in(value, typ, "$.t")
    assert bool(found) == refused, (value, found)
    assert all(p.startswith("$.t") for p in found)
