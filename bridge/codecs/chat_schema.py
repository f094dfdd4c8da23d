"""Headless output (Blade `api/chat-flow.md`, headless): an agent's final text checked against `output_schema`, sans-I/O.

The schema comes from a client, so nothing in it may run in super-linear time on the
event loop. JSON Schema's regular expressions (`pattern`, `patternProperties`, the
`regex` format) go to RE2, a linear-time engine (google-re2), never to Python's `re`,
whose backtracking makes `^(a+)+$` against 27 `a`s and a `!` take seconds (JSON Schema
2020-12 Validation §6.3.3 and Core §10.3.2.2 leave the dialect to ECMA-262; RE2 covers
it but for backreferences and lookaround). A schema with a pattern RE2 cannot compile
is refused when it is given (`check_output_schema`, invalid params naming its path),
and refused again, never run, if one reaches `headless_result` from older storage.

`headless_result` is a pure function of (output, schema); its outcome is stored with
the run (`RunOptions.check`) by the projector that first ends the run, so reads and
replays of the history take it from there instead of validating again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import msgspec
import re2

from bridge.codecs import safejson
from bridge.errors import InvalidParams
from bridge.schema.chat import RunOptions

log = logging.getLogger("bridge.codecs.chat_schema")

__all__ = ["check_output_schema", "headless_result", "result_of_check", "stored_check"]

_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.S)  # our own pattern, on a bounded text
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the client's error, not a log line
# Keys whose values are data, not subschemas: a "pattern" inside them is not a pattern.
_DATA_KEYS = frozenset(("const", "enum", "default", "examples"))


class _Unsupported(Exception):
    def __init__(self, pattern: str, why: str) -> None:
        super().__init__(f"pattern {pattern!r} is not supported (linear-time regular expressions only: {why})")


@lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise _Unsupported(pattern, why) from exc


def _search(pattern: str, text: str) -> bool:
    return _compile(pattern).search(text) is not None


def _path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _patterns(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every regular expression of a schema, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _DATA_KEYS:
                continue
            if key == "pattern" and isinstance(value, str):
                yield (*at, key), value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from (((*at, key, p), p) for p in value)
            yield from _patterns(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _patterns(value, (*at, i))


def _keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)
    elif isinstance(node, list):
        for value in node:
            yield from _keys(value)


# -- the keywords that take a regular expression, on RE2 (jsonschema's own, but for `re`) ----


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        shown = ", ".join(repr(e) for e in sorted(extras))
        if patterns:
            yield ValidationError(f"{shown} do not match any of the regexes: {', '.join(map(repr, sorted(patterns)))}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


def _regex_format(instance: object) -> bool:
    if isinstance(instance, str):
        _compile(instance)
    return True


@lru_cache(maxsize=16)
def _validator_class(base: type) -> Any:
    from jsonschema import validators

    keywords = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}
    return validators.extend(base, {k: v for k, v in keywords.items() if k in base.VALIDATORS})


def _format_checker(cls: Any) -> Any:
    from jsonschema import FormatChecker

    checker = FormatChecker(())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_regex_format, (_Unsupported,))}
    return checker


def _validator(schema: dict[str, Any]) -> Any:
    from jsonschema import validators

    cls = _validator_class(validators.validator_for(schema))
    return cls(schema, format_checker=_format_checker(cls))


# -- the two entry points -------------------------------------------------------------------


MAX_SCHEMA_NODES = 5_000  # subschemas of an output_schema once its $refs are expanded


def _expanded_size(schema: Any) -> int:
    """How many objects `schema` holds with every `$ref` replaced by its target: what
    bounds a validation's work, since each `$ref` is validated again wherever it is used
    (a chain of `allOf: [{$ref: next}, {$ref: next}]` doubles per level). Only local
    JSON-pointer references ("#", "#/$defs/x") are accepted: a remote one would be fetched
    by the validator, and an anchor is not worth the code. A cycle is refused (validation
    would recurse without end). Linear in the schema: each target is measured once."""
    sizes: dict[str, int] = {}
    visiting: set[str] = set()

    def target(ref: str) -> Any:
        if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
            raise ValueError(f"$ref {ref[:80]!r}: only local references (#/...) are supported")
        node: Any = schema
        for part in ref[2:].split("/") if len(ref) > 1 else ():
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdecimal() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise ValueError(f"$ref {ref[:80]!r} points nowhere")
        return node

    def size(node: Any) -> int:
        if isinstance(node, list):
            return sum(size(item) for item in node)
        if not isinstance(node, dict):
            return 0
        total = 1
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                if value not in sizes:
                    if value in visiting:
                        raise ValueError(f"$ref {value[:80]!r} refers to itself (a cycle)")
                    visiting.add(value)
                    sizes[value] = size(target(value))
                    visiting.discard(value)
                total += sizes[value]
            elif key not in ("const", "enum", "default", "examples"):
                total += size(value)
            if total > MAX_SCHEMA_NODES:
                raise ValueError(f"more than {MAX_SCHEMA_NODES} subschemas once its $refs are expanded")
        return total

    try:
        return size(schema)
    except RecursionError:
        raise ValueError("$refs chained too deep") from None


def check_output_schema(schema: dict[str, Any]) -> None:
    """InvalidParams unless `schema` is a valid JSON Schema (of its declared draft) whose
    regular expressions all run in linear time and whose size, $refs expanded, is bounded
    (`MAX_SCHEMA_NODES`)."""
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        raise InvalidParams(
            f"$.output_schema{_path(exc.absolute_path)[1:]}: not a valid JSON Schema: {exc.message}"
        ) from exc
    try:
        _expanded_size(schema)
    except ValueError as exc:
        raise InvalidParams(f"$.output_schema: too costly to validate: {exc}") from exc
    for where, pattern in _patterns(schema):
        try:
            _compile(pattern)
        except _Unsupported as exc:
            raise InvalidParams(f"$.output_schema{_path(where)[1:]}: {exc}") from exc
    if {"unevaluatedProperties", "patternProperties"} <= set(_keys(schema)):
        # jsonschema matches patternProperties for unevaluatedProperties with Python's
        # `re`, which this module does not reach.
        raise InvalidParams("$.output_schema: patternProperties cannot be used together with unevaluatedProperties")


def _parse_output(text: str) -> Any:
    """The JSON in an agent's final text: all of it, a fenced block, or its outermost {...}/[...]."""
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    for open_, close in (("{", "}"), ("[", "]")):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for c in candidates:
        if c:
            try:
                return safejson.decode(c)
            except msgspec.DecodeError:
                continue
    raise ValueError("no JSON value found in the output")


def headless_result(output: str, options: RunOptions) -> tuple[bool, dict[str, Any]]:
    """`chat:end.result` of a headless run: (matched, result). Without a schema it always matches."""
    schema = options.output_schema
    if schema is None:
        return True, {"output": output}
    try:
        value = _parse_output(output)
    except ValueError as exc:
        return False, {"output": output, "schema": schema, "error": f"the output is not JSON: {exc}"}
    try:
        check_output_schema(schema)  # a stored schema from before RE2: refused, never run
        errors = sorted(_validator(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    except (InvalidParams, _Unsupported) as exc:
        message = exc.message if isinstance(exc, InvalidParams) else str(exc)
        return False, {"output": value, "schema": schema, "error": f"output_schema cannot be used: {message}"}
    except Exception as exc:  # jsonschema on a schema it accepted: its bug or ours; this run's only
        log.exception("output_schema validation failed")
        return False, {"output": value, "schema": schema, "error": f"output_schema could not be checked ({type(exc).__name__})"}
    if errors:
        found = [f"{_path(e.absolute_path)}: {e.message}" for e in errors[:20]]
        return False, {
            "output": value,
            "schema": schema,
            "error": "the output does not match output_schema: " + "; ".join(found[:5]),
            "errors": found,
        }
    return True, {"output": value, "schema": schema}


def stored_check(output: str, matched: bool, result: dict[str, Any]) -> dict[str, Any]:
    """What is stored of a run's check (`RunOptions.check`): the outcome and its errors,
    not the output (the run's own events hold it) nor the schema (its options do), so
    the session record does not carry each run's output twice."""
    kept = {k: v for k, v in result.items() if k not in ("output", "schema")}
    return {"matched": matched, "text": result.get("output") is output, **kept}


def result_of_check(output: str, options: RunOptions, check: dict[str, Any]) -> dict[str, Any]:
    """`chat:end.result` again from a stored check: the output parsed again (no
    validation), the schema from the run's options."""
    value: Any = output
    if not check.get("text"):
        try:
            value = _parse_output(output)
        except ValueError:
            pass
    kept = {k: v for k, v in check.items() if k not in ("matched", "text")}
    return {"output": value, **({"schema": options.output_schema} if options.output_schema is not None else {}), **kept}
