"""An option's permission kind read from its words (ACP schema `PermissionOptionKind`), sans-I/O.

A peer that offers options with only a label (an A2A agent's `options`, Blade's
AskUserQuestion) says what each does in words. `infer_kind` reads the usual words; an
option whose words say neither allow nor reject gets no kind, so a client that picks by
kind (an auto-reject policy, a styled button) is never told a refusal is a grant.
"""

from __future__ import annotations

import re

__all__ = ["infer_kind"]

_REJECT = re.compile(r"^(no|deny|denied|reject|decline|cancel|abort|stop|never|don'?t|disallow|refuse)\b", re.I)
_ALLOW = re.compile(r"^(yes|allow|allowed|approve|accept|ok|okay|proceed|continue|grant|always allow|run|apply)\b", re.I)
_ALWAYS = re.compile(r"\b(always|never|all|every|for this session|remember)\b", re.I)


def infer_kind(label: str, description: str | None = None) -> str | None:
    """`allow_once` / `allow_always` / `reject_once` / `reject_always` from an option's
    label (its description when the label says nothing), or None when neither says."""
    for words in (label.strip(), (description or "").strip()):
        if not words:
            continue
        always = _ALWAYS.search(words) is not None
        if _REJECT.match(words):
            return "reject_always" if always else "reject_once"
        if _ALLOW.match(words) or words.lower().startswith("always"):
            return "allow_always" if always else "allow_once"
    return None
