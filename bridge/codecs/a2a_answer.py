"""The A2A client's message on a task, sans-I/O: a prompt, or the answer to the task's question.

(a2a.proto `Part`; an answer continues a `TASK_STATE_INPUT_REQUIRED` task.)
"""

from __future__ import annotations

import re
from typing import Any

from msgspec import UNSET

from bridge.codecs.a2a import block_from_part
from bridge.codecs.numbers import small_int
from bridge.core.content import ContentBlock
from bridge.core.events import Question
from bridge.schema import a2a as s

__all__ = ["answer_for", "blocks_of_message"]

_YES = re.compile(r"^(y|yes|ok|okay|allow|approve|accept|proceed|sure)\.?$", re.I)
_NO = re.compile(r"^(n|no|deny|reject|decline|refuse)\.?$", re.I)


def answer_for(question: Question, parts: list[s.Part]) -> tuple[list[str], str | None, dict[str, Any] | None]:
    """(selected option ids, free text, form values) from the client's message.

    Read, in order: a data part `{"selected": [ids or labels], "text"?}` (what the
    A2A back sends), `{"selections": {"0": [index]}, "custom": {"0": text}}` (the chat
    shape), `{"values": {...}}` or, for a form, the data object itself; else the
    message text: an option id, label or number (several, comma-separated, for a
    multi-select), yes/no for a permission, or free text where the question takes it.
    Raises ValueError saying what would fit.
    """
    by_label = {o.label.casefold(): o.id for o in question.options}
    ids = {o.id for o in question.options}

    def option(token: str) -> str | None:
        t = token.strip()
        if t in ids:
            return t
        if t.casefold() in by_label:
            return by_label[t.casefold()]
        n = small_int(t)
        if n is not None and 1 <= n <= len(question.options):
            return question.options[n - 1].id
        return None

    for p in parts:
        d = p.data
        if d is UNSET or not isinstance(d, dict):
            continue
        if isinstance(d.get("selected"), list):
            found = [option(str(x)) for x in d["selected"]]
            if not all(found):
                raise ValueError(f"selected {d['selected']!r} names no option; the options are {_listing(question)}")
            text = d.get("text") if isinstance(d.get("text"), str) else None
            return [x for x in found if x], text, None
        if isinstance(d.get("selections"), dict):
            idx = [n for n in (small_int(str(i)) for i in _as_list(d["selections"].get("0"))) if n is not None]
            picked = [question.options[i].id for i in idx if i < len(question.options)]
            custom = d.get("custom") if isinstance(d.get("custom"), dict) else {}
            text = custom.get("0") if isinstance(custom.get("0"), str) else None
            return picked, text, None
        if isinstance(d.get("values"), dict):
            return [], None, d["values"]
        if question.kind == "form":
            return [], None, d
    text = "".join(p.text for p in parts if p.text is not None).strip()
    if question.options and text:
        tokens = [t for t in text.split(",") if t.strip()] if question.multi_select else [text]
        picked = [option(t) for t in tokens]
        if all(picked):
            return [x for x in picked if x], None, None
        if question.kind == "permission":
            for pattern, kinds in ((_YES, ("allow_once", "allow_always")), (_NO, ("reject_once", "reject_always"))):
                if pattern.match(text):
                    chosen = next((o.id for o in question.options if o.kind in kinds), None)
                    if chosen:
                        return [chosen], None, None
    if text and (not question.options or question.allow_text or question.kind == "form"):
        return [], text, None
    if question.options:
        raise ValueError(f"answer the question with one of its options: {_listing(question)}")
    raise ValueError("the answer is empty")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []  # a peer's JSON: any type may come


def _listing(question: Question) -> str:
    return ", ".join(f"{o.id!r} ({o.label})" for o in question.options)


def blocks_of_message(message: s.Message) -> list[ContentBlock]:
    """A client message's parts as a prompt (a2a.proto `Part` ↔ ACP `ContentBlock`)."""
    return [block_from_part(p) for p in message.parts]
