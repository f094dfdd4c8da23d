"""How `agent-bridge ask` answers a question: from its flags, or from what a user typed.

Pure functions over the canonical `Question` (bridge/core/events.py), no I/O. Each
returns the keywords of `Session.answer` (`selected`, `text`, `values`, `cancelled`),
or None / a `Retry` when it cannot answer, so the caller decides what happens next (ask
on the terminal, or leave the question unanswered).

- Flags (`answer_by_flags`): `--answer-option ID_OR_LABEL` (repeatable: a multi-select
  takes them all) picks options by id, label or number; `--answer-text TEXT` is the free
  text of a question that allows it, or a form's values (a JSON object, or the value of
  a one-field form); `--answer allow|reject|first` answers a question with options, by
  option kind (ACP `PermissionOptionKind`) or the first one. A form never gets an answer
  it was not given.
- A typed line (`parse_reply`): a number, a label or an id; several separated by commas
  for a multi-select (or numbers separated by spaces); anything else is free text where
  the question allows it.
- Forms (`form_fields`, `parse_field`): the flat JSON Schema object of MCP 2025-11-25
  (Client: Elicitation, Requested Schema), read defensively: the schema comes from the
  agent, so anything it says that is not understood is asked as plain text, never a crash.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from bridge.core.events import Question, QuestionOption

__all__ = [
    "MAX_FIELDS",
    "MAX_OPTIONS",
    "AnswerFlags",
    "Field",
    "Policy",
    "Retry",
    "answer_by_flags",
    "form_fields",
    "match_option",
    "parse_field",
    "parse_reply",
]

Policy = Literal["allow", "reject", "first"]
MAX_FIELDS = 64  # fields of one form asked on the terminal; more are left to --answer-text
MAX_OPTIONS = 256  # choices of one form field
_ECHO = 40  # characters of what the user typed quoted back in an error
_ALLOW = ("allow_once", "allow_always")
_REJECT = ("reject_once", "reject_always")
_FIELD_TYPES = frozenset(("string", "number", "integer", "boolean", "array"))


@dataclass(frozen=True)
class AnswerFlags:
    """What the command line says about answering questions."""

    policy: Policy | None = None
    options: tuple[str, ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class Retry:
    """A typed reply that does not answer the question, and what to tell the user."""

    message: str


@dataclass(frozen=True)
class Field:
    """One field of a form, as the terminal asks it."""

    name: str
    title: str
    type: str  # string | number | integer | boolean | array
    required: bool = False
    options: tuple[QuestionOption, ...] = ()
    default: Any = None
    description: str | None = None


def _quote(text: str) -> str:
    """What was typed, quoted for a retry message: at most `_ECHO` characters of its repr
    (a control character or an astral one spells out as up to ten)."""
    shown = repr(text)
    return shown if len(shown) <= _ECHO else shown[: _ECHO - 1] + "…"


def match_option(options: list[QuestionOption] | tuple[QuestionOption, ...], token: str) -> QuestionOption | None:
    """The option `token` names: its number (from 1), its id, or its label (any case)."""
    token = token.strip()
    if not token:
        return None
    if token.isdecimal() and len(token) <= 6 and 1 <= int(token) <= len(options):
        return options[int(token) - 1]
    for opt in options:
        if opt.id == token:
            return opt
    folded = token.casefold()
    for opt in options:
        if opt.label.casefold() == folded or opt.id.casefold() == folded:
            return opt
    return None


def _by_policy(q: Question, policy: Policy) -> dict[str, Any] | None:
    if not q.options:
        return None  # nothing to pick: free text or a form is never made up
    if policy == "first":
        return {"selected": [q.options[0].id]}
    want = _ALLOW if policy == "allow" else _REJECT
    for opt in q.options:
        if opt.kind in want:
            return {"selected": [opt.id]}
    if policy == "allow":
        return {"selected": [q.options[0].id]}  # a plain choice: its first option
    return {"cancelled": True}  # nothing to reject with: declined, the way "no" is said (ACP)


def answer_by_flags(q: Question, flags: AnswerFlags) -> dict[str, Any] | None:
    """The answer the flags give `q`, or None when they give it none."""
    if q.kind == "form" and not q.options:
        if flags.text is None:
            return None
        values = _form_values(q.schema, flags.text)
        return {"values": values} if values is not None else None
    picked: list[str] = []
    for token in flags.options:
        opt = match_option(q.options, token)
        if opt is not None and opt.id not in picked:
            picked.append(opt.id)
    if picked:
        answer: dict[str, Any] = {"selected": picked if q.multi_select else picked[:1]}
        if flags.text is not None and q.allow_text:
            answer["text"] = flags.text
        return answer
    if flags.text is not None and q.allow_text:
        return {"text": flags.text}
    return _by_policy(q, flags.policy) if flags.policy is not None else None


def _form_values(schema: dict[str, Any] | None, text: str) -> dict[str, Any] | None:
    """A form's values from `--answer-text`: a JSON object, or the value of its one field."""
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    fields = form_fields(schema)
    if len(fields) != 1:
        return None
    try:
        return {fields[0].name: parse_field(fields[0], text)}
    except ValueError:
        return None


def parse_reply(q: Question, line: str) -> dict[str, Any] | Retry:
    """The answer a line typed at the terminal gives `q` (not a form: see `parse_field`)."""
    line = line.strip()
    n = len(q.options)
    hint = f"answer with a number from 1 to {n}" + (" (or a label)" if n else "")
    if q.allow_text and not q.options:
        return {"text": line} if line else Retry("type your answer")
    if not line:
        return Retry(hint + (", or type your own" if q.allow_text else ""))
    whole = match_option(q.options, line)
    if whole is not None:
        return {"selected": [whole.id]}
    if not q.multi_select:
        return {"text": line} if q.allow_text else Retry(f"{_quote(line)} is not an option: {hint}")
    parts = [p.strip() for p in line.split(",") if p.strip()]
    if len(parts) == 1 and all(t.isdecimal() for t in line.split()):
        parts = line.split()  # "1 3": numbers separated by spaces
    picked: list[str] = []
    texts: list[str] = []
    for part in parts:
        opt = match_option(q.options, part)
        if opt is None:
            texts.append(part)
        elif opt.id not in picked:
            picked.append(opt.id)
    if texts and not q.allow_text:
        return Retry(f"{_quote(texts[0])} is not an option: {hint}, several separated by commas")
    if not picked and not texts:
        return Retry(hint)
    answer: dict[str, Any] = {"selected": picked}
    if texts:
        answer["text"] = ", ".join(texts)
    return answer


# -- forms ------------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _choices(prop: dict[str, Any]) -> tuple[QuestionOption, ...]:
    """The constants a string property (or an array's items) chooses among."""
    src = prop.get("items") if prop.get("type") == "array" else prop
    if not isinstance(src, dict):
        return ()
    enum = src.get("enum")
    if isinstance(enum, list):
        names = src.get("enumNames")
        names = names if isinstance(names, list) and len(names) == len(enum) else None
        return tuple(
            QuestionOption(id=str(v), label=str(names[i]) if names and isinstance(names[i], str) else str(v))
            for i, v in enumerate(enum[:MAX_OPTIONS])
            if isinstance(v, str | int | float | bool)
        )
    alts = src.get("oneOf", src.get("anyOf"))
    if isinstance(alts, list):
        return tuple(
            QuestionOption(id=str(a["const"]), label=_str(a.get("title")) or str(a["const"]))
            for a in alts[:MAX_OPTIONS]
            if isinstance(a, dict) and isinstance(a.get("const"), str | int | float | bool)
        )
    return ()


def form_fields(schema: dict[str, Any] | None) -> list[Field]:
    """The fields of a form's schema, in its order, at most `MAX_FIELDS`; a property
    whose type is not understood is asked as a string."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    required = schema.get("required") if isinstance(schema, dict) else None
    required = set(required) if isinstance(required, list) and all(isinstance(r, str) for r in required) else set()
    fields: list[Field] = []
    for name, prop in list(props.items())[:MAX_FIELDS]:
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        kind = kind if isinstance(kind, str) and kind in _FIELD_TYPES else "string"
        title = _str(prop.get("title")) or str(name)
        fields.append(
            Field(
                name=str(name),
                title=title,
                type=kind,
                required=name in required,
                options=_choices(prop),
                default=prop.get("default"),
                description=_str(prop.get("description")),
            )
        )
    return fields


_TRUE = frozenset(("y", "yes", "true", "1", "on"))
_FALSE = frozenset(("n", "no", "false", "0", "off"))
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def parse_field(field: Field, text: str) -> Any:
    """The value `text` gives `field`; ValueError (with what to tell the user) when it
    gives none. An empty line takes the default; for an optional field without one it
    is `None` (the caller leaves the field out)."""
    text = text.strip()
    if not text:
        if field.default is not None:
            return field.default
        if field.required:
            raise ValueError(f"{field.title} is required")
        return None
    if field.type == "array":
        values = []
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            opt = match_option(field.options, part) if field.options else None
            if field.options and opt is None:
                raise ValueError(f"{_quote(part)} is not one of {', '.join(o.label for o in field.options[:10])}")
            if (opt.id if opt else part) not in values:
                values.append(opt.id if opt else part)
        return values
    if field.options:
        opt = match_option(field.options, text)
        if opt is None:
            raise ValueError(f"answer with a number from 1 to {len(field.options)} (or a label)")
        return opt.id
    if field.type == "boolean":
        if text.casefold() in _TRUE:
            return True
        if text.casefold() in _FALSE:
            return False
        raise ValueError("answer yes or no")
    if field.type in ("integer", "number"):
        if len(text) > 64 or not _NUMBER.fullmatch(text):
            raise ValueError(f"{_quote(text)} is not a number")
        if field.type == "integer" and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{_quote(text)} is too large")
        if field.type == "integer":
            if not value.is_integer():
                raise ValueError(f"{_quote(text)} is not a whole number")
            return int(value)
        return value
    return text
