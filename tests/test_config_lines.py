"""The line of each key of a TOML file (bridge/config_lines.py), which `check-config`
prints beside each problem: checked against documents written with known lines, and
total on any text (it never raises, whatever it is given)."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.config_lines import key_lines, line_of

_KEY = st.text(alphabet="abcXYZ019_- \"'#=[]", min_size=1, max_size=6)
_TEXT = st.text(alphabet=st.sampled_from(list("ab #=[]{},'\"\\\n\tü")), max_size=12)


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


class _Writer:
    """A TOML writer that notes the line it writes each key and element on."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.where: dict[str, int] = {}

    def note(self, path: str) -> None:
        self.where.setdefault(path, len(self.lines) + 1)

    def value(self, path: str, v: Any, *, nested: bool = False) -> str:
        """`v` as TOML; lines it spans are appended to self.lines except its last (a
        multi-line string only as a key's own value)."""
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            if not nested and "\n" in v and "'''" not in v and not v.endswith("'") and not v.startswith("\n") and "\\" not in v and "\t" not in v:
                first, *rest = v.split("\n")
                self.lines.append(f"{self._pending}'''{first}")
                self._pending = ""
                self.lines += rest[:-1]
                return rest[-1] + "'''"
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, list):
            out = "["
            for i, item in enumerate(v):
                self.note(f"{path}[{i}]")
                out += self.value(f"{path}[{i}]", item, nested=True) + ","
                self.lines.append(self._pending + out)  # one element per line
                self._pending, out = "", ""
            return out + "]"
        parts = []
        for k, item in v.items():  # an inline table: one line
            self.note(f"{path}.{k}")
            parts.append(f"{_key(k)} = {self.value(f'{path}.{k}', item, nested=True)}")
        return "{ " + ", ".join(parts) + " }"

    def pair(self, path: str, k: str, v: Any) -> None:
        self.note(f"{path}.{k}")
        self._pending = f"{_key(k)} = "
        text = self.value(f"{path}.{k}", v)
        self.lines.append(self._pending + text + "  # a comment with = and [brackets]")
        self._pending = ""

    def table(self, path: str, header: str, body: dict[str, Any]) -> None:
        self.note(path)
        self.lines.append(header)
        for k, v in body.items():
            self.pair(path, k, v)

    _pending = ""


_SCALAR = st.one_of(st.integers(-5, 5), st.booleans(), _TEXT)
_VALUE = st.one_of(_SCALAR, st.lists(_SCALAR, max_size=3), st.dictionaries(_KEY, _SCALAR, max_size=2))
_BODY = st.dictionaries(_KEY, _VALUE, max_size=3)


@settings(max_examples=300, deadline=None)
@given(top=_BODY, tables=st.dictionaries(_KEY, _BODY, max_size=3), array=st.lists(_BODY, max_size=3))
def test_every_key_is_found_on_its_line(top: dict[str, Any], tables: dict[str, Any], array: list[dict[str, Any]]) -> None:
    w = _Writer()
    for k, v in top.items():
        w.pair("$", k, v)
    names = [k for k in tables if k not in top and k != "many"]
    for k in names:
        w.table(f"$.{k}", f"[{_key(k)}]", tables[k])
    if "many" not in top:
        for i, body in enumerate(array):
            w.note("$.many")
            w.table(f"$.many[{i}]", "[[many]]", body)
    text = "\n".join(w.lines) + "\n"
    doc = tomllib.loads(text)  # the writer wrote valid TOML, and what was meant
    assert doc == {**top, **{k: tables[k] for k in names}, **({"many": array} if array and "many" not in top else {})}
    found = key_lines(text)
    for path, line in w.where.items():
        assert found.get(path) == line, (path, line, text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_lines_or_nothing_and_never_raises(text: str) -> None:
    for path, line in key_lines(text).items():
        assert path.startswith("$") and 1 <= line <= text.count("\n") + 1


def test_a_path_not_in_the_file_takes_its_nearest_ancestors_line() -> None:
    text = '[routes.a]\nback = { kind = "demo" }\n\n[[routes.a.options]]\nid = "m"\n'
    lines = key_lines(text)
    assert line_of(lines, "$.routes.a.back.kind") == 2
    assert line_of(lines, "$.routes.a.options[0].values") == 4  # missing: its table's line
    assert line_of(lines, "$.routes.a.options[0].id") == 5
    assert line_of(lines, "$.server.listen") is None
