"""The kind of a permission option read from its words, sans-I/O.

ACP permission options carry a kind (ACP schema, `PermissionOptionKind`: `allow_once`,
`allow_always`, `reject_once`, `reject_always`), which clients use to pick an answer by
policy and to style the buttons. Peers that offer options with only a label (an A2A
agent's `options` data part, a chat server's AskUserQuestion, a Blade-style server's
`{label, description}`) leave it to us: `infer_kind` reads it from the label (then the
description), and says None when the words do not tell; a caller must then not claim
an allow.
"""

from __future__ import annotations

import re

__all__ = ["infer_kind"]

# A refusal word first ("Reject", "No, thanks", "Never allow", "Don't run"): checked
# before the allow words, so "Never allow" and "Do not allow" read as refusals.
_REJECT = re.compile(
    r"^\W*(no|nope|deny|denied|reject|decline|refuse|cancel|abort|stop|skip|block|disallow|never|don'?t(?!\s+ask)|do\s+not(?!\s+ask))\b", re.I
)
_ALLOW = re.compile(
    r"^\W*(?:always\W+|just\W+|yes\W+)?(y|yes|ok|okay|allow|allowed|approve|accept|proceed|sure|continue|confirm|grant|permit|run|go|don'?t\s+ask|do\s+not\s+ask)\b",
    re.I,
)
# Words that make an answer stick beyond this one call.
_ALWAYS = re.compile(r"\b(always|never|forever|permanently|remember|session|every|all\s+future|don'?t\s+ask)\b", re.I)


# "Never ask again", "Stop asking", "Skip confirmation", "Don't ask": stop asking, i.e.
# allow from now on, unless a refusal word says otherwise ("Do not ask again, deny").
_NO_MORE_ASKING = re.compile(r"^\W*(?:never|stop|skip|no|don'?t|do\s+not)\s+(?:ask|asking|confirm\w*|prompt\w*)\b", re.I)
_REFUSAL = re.compile(r"\b(?:no|deny|denied|reject|decline|refuse|disallow|block)\b", re.I)
_MAX_WORDS = 256  # an option's words past this say nothing more (and cost the regexes nothing)


def infer_kind(label: str, description: str | None = None) -> str | None:
    """The option kind `label` (or else `description`) says, or None when neither tells."""
    for words in (label, description):
        if not isinstance(words, str) or not words:
            continue  # a peer's JSON may hold anything here
        words = words[:_MAX_WORDS]
        if _NO_MORE_ASKING.match(words):
            return "reject_always" if _REFUSAL.search(words, _NO_MORE_ASKING.match(words).end()) else "allow_always"  # type: ignore[union-attr]
        if _REJECT.match(words):
            return "reject_always" if _ALWAYS.search(words) else "reject_once"
        if _ALLOW.match(words):
            return "allow_always" if _ALWAYS.search(words) else "allow_once"
    return None
