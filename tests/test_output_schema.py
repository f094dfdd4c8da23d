"""Headless `output_schema` from untrusted clients (bridge/codecs/chat_schema.py).

Issue 13, finding 4: `{"type": "string", "pattern": "^(a+)+$"}` against 27 `a`s and a
`!` held the event loop ~5 s (Python's backtracking `re`, doubling per character), and
every history read and replay ran it again. Patterns now run on RE2 (linear time), a
pattern RE2 cannot run is refused when the schema is given, and the outcome is stored
with the run (tested in tests/test_chat_runs.py). RE2 being linear, "instantly" is
asserted by the answer for inputs whose backtracking time would be astronomically
long, not by a clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.codecs.chat_parts import check_output_schema, headless_result
from bridge.errors import InvalidParams
from bridge.schema.chat import RunOptions

EVIL = "^(a+)+$"


def result(value: Any, schema: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    check_output_schema(schema)
    return headless_result(json.dumps(value), RunOptions(output_schema=schema))


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    schema = {"type": "string", "pattern": EVIL}
    ok, got = result("a" * 10_000 + "!", schema)  # 2**10000 steps for a backtracking engine
    assert not ok and "does not match '^(a+)+$'" in got["error"]
    assert result("a" * 10_000, schema)[0]
    assert not result("a" * 27 + "!", schema)[0]


def test_pattern_properties_and_additional_properties_run_on_re2() -> None:
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    ok, got = result({"a" * 5000 + "!": 1}, schema)
    assert not ok and "do not match any of the regexes" in got["error"]
    ok, got = result({"a" * 5000: "text"}, schema)
    assert not ok and "is not of type 'integer'" in got["error"]
    assert result({"a" * 5000: 1}, schema)[0]
    ok, got = result({"x": 1}, {"type": "object", "properties": {"y": {}}, "additionalProperties": False})
    assert not ok and "Additional properties are not allowed ('x' unexpected)" in got["error"]


def test_the_regex_format_is_judged_by_re2() -> None:
    schema = {"type": "string", "format": "regex"}
    assert result(EVIL, schema)[0]
    ok, got = result("(a)\\1", schema)
    assert not ok and "is not a 'regex'" in got["error"]


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "string", "pattern": "(a)\\1"}, "$.output_schema.pattern: pattern '(a)\\\\1' is not supported"),
        (
            {"type": "object", "properties": {"x": {"patternProperties": {"(?=a)": {}}}}},
            "$.output_schema.properties.x.patternProperties.(?=a): pattern '(?=a)' is not supported",
        ),
        ({"prefixItems": [{"pattern": "(?<!a)b"}]}, "$.output_schema.prefixItems[0].pattern: pattern '(?<!a)b' is not supported"),
        (
            {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
            "$.output_schema: patternProperties cannot be used together with unevaluatedProperties",
        ),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_when_given(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidParams) as info:
        check_output_schema(schema)
    assert info.value.message.startswith(where), info.value.message


def test_data_that_looks_like_a_pattern_is_not_refused() -> None:
    check_output_schema({"const": {"pattern": "(a)\\1"}, "enum": [{"pattern": "(?=x)"}]})


def test_a_stored_schema_re2_cannot_run_is_refused_never_run() -> None:
    # A schema stored before this check: the output check says why, Python's re never runs.
    ok, got = headless_result('"aaa"', RunOptions(output_schema={"type": "string", "pattern": "(a)\\1"}))
    assert not ok and got["error"].startswith("output_schema cannot be used: $.output_schema.pattern: pattern")


def _doubling_chain(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        # Each level is validated twice over: 2**levels subschemas from a few hundred bytes.
        (_doubling_chain(20), "subschemas"),
        ({"$ref": "#"}, "cycle"),  # validation would recurse without end
        ({"properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {"b": {"items": {"$ref": "#/$defs/b"}}}}, "cycle"),
        ({"$ref": "http://127.0.0.1:9/schema.json"}, "only local"),  # the validator would fetch it
        ({"$ref": "#/$defs/missing"}, "points nowhere"),
    ],
)
def test_a_schema_too_costly_to_validate_is_refused_when_given(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidParams, match=why):
        check_output_schema(schema)
    matched, result = headless_result("1", RunOptions(output_schema=schema))  # a stored one: never run
    assert not matched and why in result["error"]


def test_an_ordinary_schema_with_local_refs_validates() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}, "b": {"items": {"$ref": "#/$defs/s"}}},
              "$defs": {"s": {"type": "string"}}}  # fmt: skip
    check_output_schema(schema)
    assert headless_result('{"a": "x", "b": ["y"]}', RunOptions(output_schema=schema))[0]
    assert not headless_result('{"a": 1}', RunOptions(output_schema=schema))[0]
