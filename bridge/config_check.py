"""Every problem of a config table at once, each with a hint: what `check-config` prints.

msgspec stops at the first error in a value, so a misspelt key would hide a bad value
beside it. When msgspec refuses a table, `problems_in` walks the TOML value against
the Struct type it was decoded as (the types read from the Structs' annotations, the
ones msgspec itself uses): an unknown key is reported with the nearest known one
("did you mean"), a value that is not one of a `Literal`'s (or a tagged union's `kind`)
with the allowed ones, a missing key at its table; each leaf is checked by msgspec
itself (`msgspec.convert` on that value alone), so the messages and the rules are
msgspec's. A table whose keys and values all pass is converted whole, which runs its
`__post_init__` checks. msgspec does every real decode (bridge/config.py); this only
says more when it has refused one.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from bridge.errors import ConfigProblem

__all__ = ["choices_hint", "describe", "did_you_mean", "problem_of", "problems_in", "with_route_hint"]

_AT = re.compile(r" - at `\$(.*)`$")
_UNKNOWN = re.compile(r"Object contains unknown field `(.*)`")
_MAX_DEPTH = 32  # a config value nested deeper than this is checked by msgspec alone


def describe(problem: str, file: str | None) -> str:
    """One line for a person: `FILE:LINE: $.path: message; hint` (what is known of it)."""
    found = ConfigProblem.of(problem)
    text = f"{found}; {found.hint}" if found.hint else str(found)
    if not found.path:  # about the file itself: its message names it
        return text
    where = file if file is not None else "(built-in demo)"
    return f"{where}:{found.line}: {text}" if found.line is not None else f"{where}: {text}"


def did_you_mean(word: object, candidates: Iterable[str]) -> str | None:
    """'did you mean 'x'?' for the candidate closest to `word` (difflib), if one is close."""
    if not isinstance(word, str):
        return None
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def choices_hint(word: object, allowed: Iterable[object]) -> str:
    """The allowed values, and the closest to `word` when one is close."""
    values = list(allowed)
    hint = "allowed values: " + ", ".join(repr(v) for v in values)
    near = did_you_mean(word, [v for v in values if isinstance(v, str)])
    return f"{hint}; {near}" if near else hint


def with_route_hint(problem: str, routes: Mapping[str, Any]) -> str:
    """A "no route named 'x'" problem (ours or a front's check) with the nearest route's
    name, else the routes there are."""
    found = ConfigProblem.of(problem)
    m = re.search(r"no route named '([^']*)'", found.message)
    if m is None or found.hint is not None:
        return problem
    hint = did_you_mean(m.group(1), routes) or ("routes are: " + ", ".join(repr(r) for r in routes) if routes else None)
    return ConfigProblem(found.path, found.message, hint=hint)


def problem_of(path: str, exc: msgspec.ValidationError) -> ConfigProblem:
    """msgspec's error as a problem at its own path, re-rooted at `path` (the value decoded)."""
    msg = str(exc)
    m = _AT.search(msg)
    if m:
        path, msg = path + m.group(1), msg[: m.start()]
    # An unknown key is reported at its own path (`$.routes.x.tiemout_s`), not its table's.
    u = _UNKNOWN.fullmatch(msg)
    if u:
        return ConfigProblem(f"{path}.{u.group(1)}", "unknown key")
    return ConfigProblem(path, msg)


def problems_in(value: Any, typ: Any, path: str, *, hint_keys: Iterable[str] = ()) -> list[ConfigProblem]:
    """Every problem of `value` decoded as `typ`, rooted at `path` (empty when it decodes).
    `hint_keys`: more keys the table at `path` may hold (read elsewhere), for "did you mean"."""
    out: list[ConfigProblem] = []
    _walk(value, typ, path, out, hint_keys=tuple(hint_keys), depth=0)
    return out


def _strip(typ: Any) -> Any:
    while get_origin(typ) is Annotated:
        typ = get_args(typ)[0]
    return typ


def _is_struct(typ: Any) -> bool:
    return isinstance(typ, type) and issubclass(typ, msgspec.Struct)


def _has_struct(typ: Any, depth: int = 0) -> bool:
    typ = _strip(typ)
    if _is_struct(typ):
        return True
    return depth < 8 and any(_has_struct(arg, depth + 1) for arg in get_args(typ) if get_origin(typ) is not Literal)


def _walk(value: Any, typ: Any, path: str, out: list[ConfigProblem], *, hint_keys: tuple[str, ...] = (), depth: int) -> None:
    base = _strip(typ)
    origin = get_origin(base)
    if depth > _MAX_DEPTH:
        _leaf(value, typ, path, out)
    elif _is_struct(base):
        _struct(value, base, path, out, hint_keys=hint_keys, depth=depth)
    elif origin in (Union, types.UnionType):
        _union(value, base, path, out, depth=depth)
    elif origin is list and isinstance(value, list) and _has_struct(base):
        before = len(out)
        for i, item in enumerate(value):
            _walk(item, get_args(base)[0], f"{path}[{i}]", out, depth=depth + 1)
        if len(out) == before:
            _leaf(value, typ, path, out)  # the list's own bounds
    elif origin is dict and isinstance(value, dict) and _has_struct(base):
        before = len(out)
        for key, item in value.items():
            _walk(item, get_args(base)[1], f"{path}.{key}", out, depth=depth + 1)
        if len(out) == before:
            _leaf(value, typ, path, out)
    else:
        _leaf(value, typ, path, out)


def _leaf(value: Any, typ: Any, path: str, out: list[ConfigProblem]) -> None:
    try:
        msgspec.convert(value, typ)
    except msgspec.ValidationError as exc:
        problem = problem_of(path, exc)
        allowed = _literal_values(typ)
        if allowed is not None and problem.path == path:
            problem = ConfigProblem(problem.path, problem.message, hint=choices_hint(value, allowed))
        out.append(problem)


def _literal_values(typ: Any) -> tuple[Any, ...] | None:
    """A `Literal`'s values (also inside `X | None`), else None."""
    typ = _strip(typ)
    if get_origin(typ) in (Union, types.UnionType):
        members = [m for m in get_args(typ) if m is not type(None)]
        typ = _strip(members[0]) if len(members) == 1 else None
    return get_args(typ) if get_origin(typ) is Literal else None


def _struct(value: Any, cls: type[msgspec.Struct], path: str, out: list[ConfigProblem], *, hint_keys: tuple[str, ...] = (), depth: int) -> None:
    if not isinstance(value, dict):
        _leaf(value, cls, path, out)
        return
    fields = msgspec.structs.fields(cls)
    known = {f.encode_name for f in fields}
    tag_field = cls.__struct_config__.tag_field
    before = len(out)
    for key in value:
        if key != tag_field and key not in known:
            out.append(ConfigProblem(f"{path}.{key}", "unknown key", hint=did_you_mean(key, [*known, *hint_keys])))
    for field in fields:
        if field.encode_name in value:
            _walk(value[field.encode_name], field.type, f"{path}.{field.encode_name}", out, depth=depth + 1)
        elif field.required:
            out.append(ConfigProblem(path, f"Object missing required field `{field.encode_name}`"))
    if len(out) == before:
        _leaf(value, cls, path, out)  # its __post_init__, and anything the walk does not see


def _union(value: Any, typ: Any, path: str, out: list[ConfigProblem], *, depth: int) -> None:
    members = [m for m in get_args(typ) if m is not type(None)]
    if value is None and len(members) < len(get_args(typ)):
        return
    structs = [_strip(m) for m in members if _is_struct(_strip(m))]
    tagged = [s for s in structs if s.__struct_config__.tag_field is not None]
    if tagged and isinstance(value, dict):
        tag_field = tagged[0].__struct_config__.tag_field
        by_tag = {s.__struct_config__.tag: s for s in tagged}
        if tag_field not in value:
            out.append(ConfigProblem(path, f"Object missing required field `{tag_field}`", hint=choices_hint(None, by_tag)))
        elif not isinstance(value[tag_field], (str, int)) or value[tag_field] not in by_tag:  # (a list is unhashable)
            tag = value[tag_field]
            out.append(ConfigProblem(f"{path}.{tag_field}", f"Invalid value {tag!r}", hint=choices_hint(tag, by_tag)))
        else:
            _struct(value, by_tag[value[tag_field]], path, out, depth=depth)
    elif len(members) == 1 and _has_struct(members[0]):
        _walk(value, members[0], path, out, depth=depth)
    elif isinstance(value, dict) and len(structs) == 1:
        _walk(value, structs[0], path, out, depth=depth)
    else:
        _leaf(value, typ, path, out)
