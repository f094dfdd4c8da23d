"""An agent's question asked of the MCP client that called a route tool, when it can
answer: `elicitation/create` in form mode (MCP 2025-11-25, Client: Elicitation).

- a permission is one required string property whose `enum` is the option labels;
- a choice is a string (or, multi-select, an array of strings) over the option labels,
  plus an optional free-text property `other` when the question takes text;
- a form is its own JSON Schema (the canonical form is MCP-form shaped).

The client's action becomes the answer: `accept` its content; `decline` the reject
option of a permission (a refusal, not a cancel), any other question declined;
`cancel` a cancelled answer. A client that did not declare form elicitation, or that
answers with an error, cannot be asked: `tools.py` declines for it.
"""

from __future__ import annotations

from typing import Any

from bridge.core.events import Question

__all__ = ["answer_of", "can_elicit", "form_of"]


def can_elicit(session: Any) -> bool:
    """Whether the client declared form elicitation (an empty `elicitation` object means
    form, MCP 2025-11-25, Client: Elicitation, Capabilities)."""
    caps = getattr(session, "client_capabilities", None)
    e = getattr(caps, "elicitation", None)
    return e is not None and (e.form is not None or e.url is None)


def form_of(q: Question) -> dict[str, Any]:
    """The requested schema of `q` (flat, primitive properties only)."""
    if q.kind == "form":
        return q.schema or {"type": "object", "properties": {}}
    labels = _labels(q)
    title = q.header or ("Permission" if q.kind == "permission" else "Choice")
    if q.multi_select:
        choice: dict[str, Any] = {"type": "array", "title": title, "items": {"type": "string", "enum": labels}}
    else:
        choice = {"type": "string", "title": title, "enum": labels}
    props: dict[str, Any] = {"choice": choice}
    required = ["choice"]
    if q.kind == "choice" and q.allow_text:
        props["other"] = {"type": "string", "title": "Other", "description": "Your own answer"}
        required = []
    return {"type": "object", "properties": props, "required": required}


def _labels(q: Question) -> list[str]:
    """The options' labels, each one once: a label two options share gets " (2)", " (3)"...
    so the label the client picks names exactly one option."""
    seen: dict[str, int] = {}
    out = []
    for o in q.options:
        n = seen[o.label] = seen.get(o.label, 0) + 1
        out.append(o.label if n == 1 else f"{o.label} ({n})")
    return out


def _ids(q: Question, picked: Any) -> list[str]:
    labels = picked if isinstance(picked, list) else [picked]
    by_label = dict(zip(_labels(q), (o.id for o in q.options), strict=True))
    return [by_label[x] for x in labels if isinstance(x, str) and x in by_label]


def answer_of(q: Question, action: str, content: dict[str, Any] | None) -> dict[str, Any]:
    """`Session.answer` keywords for the client's elicitation result."""
    if action == "accept":
        content = content or {}
        if q.kind == "form":
            return {"values": content}
        other = content.get("other")
        text = other if isinstance(other, str) and other else None
        return {"selected": _ids(q, content.get("choice")), "text": text}
    if action == "decline" and q.kind == "permission":
        reject = next((o.id for o in q.options if o.kind == "reject_once"), None) or next(
            (o.id for o in q.options if o.kind == "reject_always"), None
        )
        if reject is not None:
            return {"selected": [reject]}
    return {"cancelled": True}
