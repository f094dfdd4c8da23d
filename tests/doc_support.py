"""Reading the documentation's examples, so tests can run them: README.md and docs/*.md.

- `blocks(text)`: the fenced code blocks of a Markdown text, each with its language, its
  lines, its line number and the `<!-- marker -->` comment just above it (if any).
- `normalized(value)`: a JSON value with what differs from run to run made the same:
  ids the daemon makes (32 hex digits, alone or with a `:suffix`) are numbered by first
  appearance, so two transcripts compare equal when their ids are used the same way;
  times (`started_at`, `created_at`, `updated_at`) and durations (`duration_ms`) become
  placeholders.
- `covers(doc, real)`: `doc` equals `real`, except that a list in `doc` may be a prefix of
  the list in `real` (the docs shorten long lists of commands).
- `curl(command, env)`: a `curl` command line as (method, url, headers, body).
- `OpenApiCheck(document)`: does an answer fit the response schema of its path, method and
  status in an OpenAPI document (strictly)?
- `strict(schema)`: a copy of a JSON Schema tree where every object schema that lists its
  properties allows no other, so an example with a misspelt field fails validation.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "Block", "OpenApiCheck", "blocks", "covers", "curl", "new_ids", "normalized", "strict"]

ROOT = Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*(.*?)\s*-->\s*$")
_ID = re.compile(r"\b[0-9a-f]{32}\b")
_TIMES = {"started_at": "<time>", "created_at": "<time>", "updated_at": "<time>", "duration_ms": "<duration>"}


@dataclass
class Block:
    lang: str
    line: int  # of the opening fence, 1-based
    marker: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def blocks(text: str) -> list[Block]:
    out: list[Block] = []
    current: Block | None = None
    previous = ""
    for n, line in enumerate(text.splitlines(), 1):
        if current is not None:
            if line.strip() == "```":
                out.append(current)
                current = None
            else:
                current.lines.append(line)
            continue
        m = _FENCE.match(line)
        if m:
            marker = _MARKER.match(previous)
            current = Block(m.group(1), n, marker.group(1) if marker else None)
        if line.strip():
            previous = line.strip()
    assert current is None, f"a code block opened at line {current.line} is never closed"
    return out


class _Ids:
    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, m: re.Match[str]) -> str:
        return self.seen.setdefault(m.group(0), f"<id{len(self.seen) + 1}>")


def normalized(value: Any, ids: _Ids | None = None) -> Any:
    ids = ids if ids is not None else _Ids()
    if isinstance(value, dict):
        return {k: _TIMES[k] if k in _TIMES and v is not None else normalized(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v, ids) for v in value]
    if isinstance(value, str):
        return _ID.sub(ids, value)
    return value


def new_ids() -> _Ids:
    """One numbering shared by several values (a transcript, frame by frame)."""
    return _Ids()


def covers(doc: Any, real: Any, where: str = "$") -> list[str]:
    """Where `doc` and `real` differ (empty: `doc` covers `real`)."""
    if isinstance(doc, dict) and isinstance(real, dict):
        problems = [f"{where}: keys {sorted(set(doc) ^ set(real))} differ"] if set(doc) != set(real) else []
        return problems + [p for k in doc.keys() & real.keys() for p in covers(doc[k], real[k], f"{where}.{k}")]
    if isinstance(doc, list) and isinstance(real, list):
        if len(doc) > len(real) or (len(doc) < len(real) and not doc):
            return [f"{where}: {len(doc)} items documented, {len(real)} answered"]
        return [p for i, (d, r) in enumerate(zip(doc, real)) for p in covers(d, r, f"{where}[{i}]")]
    return [] if doc == real else [f"{where}: documented {doc!r}, answered {real!r}"]


def curl(command: str, env: dict[str, str]) -> tuple[str, str, dict[str, str], bytes | None]:
    """`curl [-s] [-N] [-i] [-X METHOD] URL [-H 'k: v']... [-d BODY]`, with `$NAME`s from `env`."""
    words = shlex.split(_expand(command, env))
    assert words[0] == "curl", command
    method, url, headers, body = "", "", {}, None
    it = iter(words[1:])
    for word in it:
        if word in ("-s", "-N", "-sN", "-Ns"):
            continue
        if word == "-X":
            method = next(it)
        elif word == "-H":
            k, _, v = next(it).partition(":")
            headers[k.strip().lower()] = v.strip()
        elif word == "-d":
            body = next(it).encode()
        elif word.startswith("http"):
            url = word
        else:
            raise AssertionError(f"{command}: the test does not know curl's {word!r}")
    return method or ("POST" if body is not None else "GET"), url, headers, body


def _expand(command: str, env: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in env, f"{command}: ${name} is not set by the examples before it"
        return env[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, command)


def strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) if k not in ("properties",) else {p: strict(s) for p, s in v.items()} for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema and "allOf" not in schema:
        out["additionalProperties"] = False
    return out


class OpenApiCheck:
    """Real answers against an OpenAPI 3.1 document's response schemas (JSON Schema 2020-12)."""

    URI = "urn:openapi"

    def __init__(self, document: dict[str, Any]) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        self.doc = strict(document)
        self.registry = Registry().with_resource(self.URI, Resource(self.doc, DRAFT202012))

    def errors(self, schema_at: str, value: Any) -> list[str]:
        import jsonschema

        validator = jsonschema.Draft202012Validator({"$ref": self.URI + schema_at}, registry=self.registry)
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]

    def response(self, method: str, path: str, status: int, body: Any, where: str) -> None:
        for template, item in self.doc["paths"].items():
            if re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", template), path) and method.lower() in item:
                responses = item[method.lower()]["responses"]
                response = responses.get(str(status), responses.get("default"))
                assert response is not None, f"{where}: {method} {template} documents no {status}"
                at = response["$ref"] if "$ref" in response else f"#/paths/{_escape(template)}/{method.lower()}/responses/{status}"
                errors = self.errors(at + "/content/application~1json/schema", body)
                assert not errors, f"{where}: {method} {path} {status}: {errors}"
                return
        raise AssertionError(f"{where}: {method} {path} is not in the OpenAPI document")


def _escape(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901 §3)."""
    return token.replace("~", "~0").replace("/", "~1")
