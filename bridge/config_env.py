"""Settings from outside the file (the environment, `serve --listen`), and where each
problem of a config file is (its line, or the variable that set it).

Any key of the file can be set from the environment, so a container or a unit file
changes one setting without writing a TOML file:

    AGENT_BRIDGE__SERVER__LISTEN=0.0.0.0:9000      [server] listen = "0.0.0.0:9000"
    AGENT_BRIDGE__LOG_LEVEL=debug                  log_level = "debug"
    AGENT_BRIDGE__ROUTES__DEMO__CANCEL_GRACE_S=2   [routes.demo] cancel_grace_s = 2

`AGENT_BRIDGE__` then the table names and the key, separated by a double underscore;
names are matched without regard to case (a route's name as the file writes it, else
in lower case: a route the file does not have is added). The value is read as a TOML
value when it is one (`2`, `true`, `["a", "b"]`, `{ kind = "demo" }`), else as a
string. `AGENT_BRIDGE_LISTEN=HOST:PORT` is a shorter name for the listener. Precedence:
`serve --listen` > `AGENT_BRIDGE_LISTEN` > `AGENT_BRIDGE__...` > the file. The result is
validated as the file is: an unknown key or a bad value names the variable that set it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from bridge.config_lines import key_lines, line_of
from bridge.errors import ConfigProblem

__all__ = ["ENV_PREFIX", "LISTEN_ENV", "Override", "apply_overrides", "locate", "overrides_from", "toml_error_line"]

ENV_PREFIX = "AGENT_BRIDGE__"
LISTEN_ENV = "AGENT_BRIDGE_LISTEN"
_MAX_DEPTH = 8  # tables deep an override may reach (the config's deepest key is less)
_TOML_AT = re.compile(r"\(at line (\d+), column \d+\)")


class Override(NamedTuple):
    source: str  # what set it: "$AGENT_BRIDGE__SERVER__LISTEN", "--listen"
    keys: tuple[str, ...]  # as written in the variable's name (matched to the file's later)
    value: Any


def _value(text: str) -> Any:
    """A TOML value when `text` is one, else `text` itself (a string)."""
    try:
        doc = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, RecursionError):  # RecursionError: arrays or tables nested past tomllib's depth
        return text
    # "1\nother = 2" parses, as two keys: that is not one value, so it is a string.
    return doc["v"] if len(doc) == 1 else text


def overrides_from(environ: Mapping[str, str], *, listen: str | None = None) -> tuple[list[Override], list[ConfigProblem]]:
    """The overrides `environ` and the `--listen` flag ask for, weakest first."""
    found: list[Override] = []
    problems: list[ConfigProblem] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = tuple(name[len(ENV_PREFIX) :].split("__"))
        if not all(keys) or len(keys) > _MAX_DEPTH:
            problems.append(ConfigProblem("", f"${name}: not a config key (AGENT_BRIDGE__TABLE__KEY: names separated by '__')"))
            continue
        found.append(Override(f"${name}", keys, _value(environ[name])))
    if environ.get(LISTEN_ENV):
        found.append(Override(f"${LISTEN_ENV}", ("server", "listen"), environ[LISTEN_ENV]))
    if listen is not None:
        found.append(Override("--listen", ("server", "listen"), listen))
    return found, problems


def _match(table: Mapping[str, Any], key: str) -> str:
    """The file's own spelling of `key` in `table`, else `key` in lower case."""
    if key in table:
        return key
    same = [k for k in table if k.lower() == key.lower()]
    return same[0] if len(same) == 1 else key.lower()


def apply_overrides(raw: dict[str, Any], overrides: Sequence[Override]) -> tuple[list[Override], list[ConfigProblem]]:
    """Set each override in `raw` (the decoded file), in order; the overrides with their
    keys as applied (the file's spelling), and the problems of those that cannot be."""
    applied: list[Override] = []
    problems: list[ConfigProblem] = []
    for override in overrides:
        table: Any = raw
        keys: list[str] = []
        for key in override.keys[:-1]:
            keys.append(_match(table, key))
            table = table.setdefault(keys[-1], {})
            if not isinstance(table, dict):
                where = "$." + ".".join(keys)
                problems.append(ConfigProblem(where, f"is not a table, so {override.source} cannot set a key in it"))
                break
        else:
            keys.append(_match(table, override.keys[-1]))
            table[keys[-1]] = override.value
            applied.append(Override(override.source, tuple(keys), override.value))
    return applied, problems


def locate(problems: Sequence[str], text: str | None, overrides: Sequence[Override]) -> list[str]:
    """Each problem with where it is: the variable or flag that set its key (the last one
    to set it, as that is the one in force), else its line in the file (`text`)."""
    lines = key_lines(text) if text is not None else {}
    out: list[str] = []
    for problem in problems:
        found = ConfigProblem.of(problem)
        source = None
        for override in overrides:
            path = "$." + ".".join(override.keys)
            if found.path == path or found.path.startswith((path + ".", path + "[")):
                source = override.source
        if source is not None:
            out.append(ConfigProblem(found.path, f"{found.message} (set by {source})", hint=found.hint))
        elif found.path:
            out.append(found.located(line_of(lines, found.path)))
        else:
            out.append(found)
    return out


def toml_error_line(exc: tomllib.TOMLDecodeError, text: str) -> int | None:
    """The line tomllib names in its message (it has no attribute for it before Python 3.14)."""
    m = _TOML_AT.search(str(exc))
    if m:
        return int(m.group(1))
    return text.count("\n") + 1 if "end of document" in str(exc) else None
