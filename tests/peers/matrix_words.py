"""The pair matrix's words, as the Python test peers read them in `--matrix` mode.

The words and values are the demo agent's (README, "The demo agent";
tests/matrix/kinds.py): each peer plays them in its own protocol, so one table of
expectations holds for every back. Only what a peer needs to speak is here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.matrix.kinds import DATA, PIXEL_PNG  # noqa: E402

__all__ = ["DATA", "PIXEL_PNG", "README_BODY", "STEPS", "WORDS", "parse", "thought_text"]

WORDS = frozenset(
    ("think", "plan", "tool", "ask", "choose", "fork", "progress", "data", "image", "slow", "fail", "refuse", "max_tokens", "max_turns")
)
STEPS = ("tool", "ask", "choose", "fork", "slow")  # the words that run a step, in the demo's order
README_BODY = "# agent-bridge\nOne daemon, four agent protocols.\n"
_WORD = re.compile(r"^\s*(?:/([a-z_]+)\b|([a-z_]+):(\d*))")


def parse(text: str) -> tuple[set[str], str]:
    """The leading words of a prompt and the rest (`plan: tool: hello` → {plan, tool}, "hello")."""
    words: set[str] = set()
    while True:
        m = _WORD.match(text)
        if not m or (m.group(1) or m.group(2)) not in WORDS:
            return words, text.strip()
        words.add(m.group(1) or m.group(2))
        text = text[m.end() :]


def thought_text(rest: str) -> str:
    return f"The user wrote {rest!r}. Let me work out what to do."
