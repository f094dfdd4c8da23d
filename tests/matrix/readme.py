"""README's compatibility matrix, rendered from the matrix's own tables (so docs cannot drift).

    python -m tests.matrix.readme --write   # rewrite the block between the markers
    python -m tests.matrix.readme           # print it

tests/test_matrix_readme.py fails when README's block differs from `render()`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.matrix.backs import ROWS
from tests.matrix.fronts import FRONTS
from tests.matrix.kinds import KINDS
from tests.matrix.rows import Absent, Carry, Degraded, Full, carry

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
NAMES = [k.name for k in KINDS] + ["usage"]


def _table(columns: list[tuple[str, dict[str, Carry]]], notes: list[str]) -> list[str]:
    lines = ["| kind | " + " | ".join(title for title, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name in NAMES:
        cells = []
        for _, table in columns:
            c = carry(table, name)
            reason = c.reason if isinstance(c, (Degraded, Absent)) else ""
            if reason and reason not in notes:
                notes.append(reason)
            ref = f"<sup>{notes.index(reason) + 1}</sup>" if reason else ""
            cells.append("✅" if isinstance(c, Full) else ("🟡" if isinstance(c, Degraded) else "—") + ref)
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def render() -> str:
    notes: list[str] = []
    out = [BEGIN, "", "Generated from `tests/matrix/` (`python -m tests.matrix.readme --write`); proven by",
           "`tests/test_e2e_matrix.py` (every front × every back × every kind, with the SDKs named).",
           "✅ carried · 🟡 degraded (footnote: how) · — cannot be carried (footnote: why).", "",
           "Fronts (what a client of each front is shown):", ""]  # fmt: skip
    out += _table([(f.title, f.carries) for f in FRONTS], notes)
    out += ["", "Backs (what reaches the bridge from each agent):", ""]
    out += _table([(r.title, r.carries) for r in ROWS], notes)
    out += [""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)] + ["", END]
    return "\n".join(out)


def current(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def write() -> None:
    text = README.read_text()
    block = current(text)
    if block is None:
        head = "## Compatibility\n"
        at = text.index(head) + len(head)
        text = text[:at] + "\n" + render() + "\n" + text[at:]
    else:
        text = text.replace(block, render())
    README.write_text(text)


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write()
    else:
        print(render())
