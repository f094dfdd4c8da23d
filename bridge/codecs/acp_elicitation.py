"""ACP form elicitation ↔ canonical questions, both ways (ACP schema, `elicitation/create`,
form mode: a flat JSON Schema object of primitive properties, the subset of MCP
2025-11-25, Client: Elicitation, Requested Schema).

The ACP front asks an editor, the ACP back is asked by an agent; both read one shape, so
a question that crosses two bridges stays the question it was:

- `with_schema` (front): a choice becomes a form with a `choice` property, a string whose
  `oneOf` lists the options (`const` = option id, `title` = label), or for several answers
  an array whose `items.anyOf` does; plus a string `other` when free text is allowed.
- `answer_of` (front): the `Session.answer` keywords of an editor's accepted form.
- `question_of` (back): an agent's form request as a canonical question. One property
  choosing among constants (a string with `enum`, `oneOf` or `anyOf` of `const`s, or an
  array whose `items` has them), with at most one plain string property beside it, is a
  choice (multi-select for the array, `allow_text` for the string); any other form is a
  `form` question carrying the agent's schema. Requests outside the form subset (another
  mode, a schema that is not a flat object, more than `MAX_FIELDS` properties or
  `MAX_OPTIONS` options to a property) raise InvalidParams, the agent's fault.
- `content_of` (back): the answer as the `content` of `{"action": "accept"}`, in the
  agent's own field names.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bridge.core.events import Question, QuestionAnswered, QuestionOption
from bridge.errors import InvalidParams
from bridge.schema import acp

__all__ = ["MAX_FIELDS", "MAX_OPTIONS", "AgentQuestion", "answer_of", "content_of", "question_of", "with_schema"]

MAX_FIELDS = 64  # properties of one form
MAX_OPTIONS = 256  # constants of one property
# The property types of a form (ACP schema, `ElicitationPropertySchema`; MCP
# `PrimitiveSchemaDefinition`); an agent's own `_`-prefixed types are kept as form fields.
_TYPES = frozenset(("string", "number", "integer", "boolean", "array"))


def with_schema(question: Question) -> Question:
    """`question` with the form an editor is asked (a form question keeps its own)."""
    if question.schema is not None:
        return question
    choices = [{"const": o.id, "title": o.label} for o in question.options]
    props: dict[str, Any] = {}
    if question.multi_select:
        props["choice"] = {"type": "array", "title": question.header or "Choice", "items": {"anyOf": choices}}
    else:
        props["choice"] = {"type": "string", "title": question.header or "Choice", "oneOf": choices}
    if question.allow_text:
        props["other"] = {"type": "string", "title": "Other"}
    return msgspec.structs.replace(question, schema={"type": "object", "properties": props})


def answer_of(question: Question, content: dict[str, Any]) -> dict[str, Any]:
    """The answer an accepted form of `with_schema(question)` gives (`Session.answer` keywords)."""
    if question.kind == "form":
        return {"values": content}
    choice = content.get("choice")
    selected = choice if isinstance(choice, list) else ([choice] if isinstance(choice, str) else [])
    other = content.get("other")
    return {"selected": [str(s) for s in selected], "text": other if isinstance(other, str) and other else None}


class AgentQuestion(msgspec.Struct, frozen=True):
    """An agent's form as the question asked, and where its answer goes back: the
    property holding the choice, the one holding free text, and every property name."""

    question: Question
    choice: str | None = None
    text: str | None = None
    fields: tuple[str, ...] = ()


def question_of(question_id: str, params: acp.ElicitationParams) -> AgentQuestion:
    """The canonical question of an agent's `elicitation/create`; InvalidParams when the
    request is outside the form subset the bridge declared."""
    if params.mode != "form":
        raise InvalidParams(f"elicitation mode {params.mode!r} is not offered: the client capability declared is form only")
    schema = params.requested_schema
    if schema is None:
        raise InvalidParams("a form elicitation needs requestedSchema")
    if schema.get("type", "object") != "object":
        raise InvalidParams(f"requestedSchema must be an object schema, not type {schema.get('type')!r}")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise InvalidParams("requestedSchema.properties must be an object")
    if len(props) > MAX_FIELDS:
        raise InvalidParams(f"requestedSchema has {len(props)} properties; at most {MAX_FIELDS} are asked")
    required = schema.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise InvalidParams("requestedSchema.required must be a list of property names")
    choices: dict[str, list[QuestionOption]] = {}
    texts: list[str] = []
    for name, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not isinstance(kind, str) or not (kind in _TYPES or kind.startswith("_")):
            raise InvalidParams(f"requestedSchema.properties.{name} must be a primitive property (string, number, integer, boolean or an array of strings)")  # fmt: skip
        options = _options(name, prop)
        if options is not None:
            choices[name] = options
        elif kind == "string":
            texts.append(name)
    fields = tuple(props)
    base = Question(id=question_id, kind="form", prompt=params.message, tool_call_id=params.tool_call_id)
    if len(choices) == 1 and len(fields) - 1 == len(texts) <= 1:
        ((name, options),) = choices.items()
        title = props[name].get("title")
        question = msgspec.structs.replace(
            base,
            kind="choice",
            options=options,
            multi_select=props[name]["type"] == "array",
            allow_text=bool(texts),
            header=title if isinstance(title, str) else None,
        )
        return AgentQuestion(question, choice=name, text=texts[0] if texts else None, fields=fields)
    return AgentQuestion(msgspec.structs.replace(base, schema=schema), fields=fields)


def content_of(asked: AgentQuestion, answer: QuestionAnswered) -> dict[str, Any]:
    """The agent's `content` for an answer that is not cancelled, in its field names."""
    q = asked.question
    if q.kind == "form":
        values = answer.values or {}
        if not values and answer.text and len(asked.fields) == 1:
            values = {asked.fields[0]: answer.text}  # a form of one field answered in words
        return {k: v for k, v in values.items() if k in asked.fields}
    content: dict[str, Any] = {}
    if asked.choice is not None and answer.selected:
        content[asked.choice] = list(answer.selected) if q.multi_select else answer.selected[0]
    if asked.text is not None and answer.text:
        content[asked.text] = answer.text
    return content


def _options(name: str, prop: dict[str, Any]) -> list[QuestionOption] | None:
    """The constants `prop` chooses among, as options; None when it is not a choice."""
    kind = prop["type"]
    if kind == "array":
        items = prop.get("items")
        src = items if isinstance(items, dict) else {}
    elif kind == "string":
        src = prop
    else:
        return None
    options: list[QuestionOption] = []
    enum = src.get("enum")
    alts = src.get("oneOf", src.get("anyOf"))
    if isinstance(enum, list):
        names = src.get("enumNames")
        if not isinstance(names, list) or len(names) != len(enum) or not all(isinstance(n, str) for n in names):
            names = None
        if not all(isinstance(v, str) for v in enum):
            return None
        options = [QuestionOption(id=v, label=names[i] if names else v) for i, v in enumerate(enum)]
    elif isinstance(alts, list):
        if not all(isinstance(a, dict) and isinstance(a.get("const"), str) for a in alts):
            return None
        for a in alts:
            title, desc = a.get("title"), a.get("description")
            label = title if isinstance(title, str) and title else a["const"]
            options.append(QuestionOption(id=a["const"], label=label, description=desc if isinstance(desc, str) else None))
    if not options or len({o.id for o in options}) != len(options):
        return None
    if len(options) > MAX_OPTIONS:
        raise InvalidParams(f"requestedSchema.properties.{name} has {len(options)} options; at most {MAX_OPTIONS} are asked")
    return options
