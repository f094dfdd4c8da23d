"""A cell's expected `Seen` (front.carry(back.carry(kind.expect))) and its comparison with what was seen."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from tests.matrix.fold import json_prefix
from tests.matrix.fronts import FrontColumn
from tests.matrix.kinds import Kind, Seen
from tests.matrix.rows import Absent, BackRow, Carry, Degraded, carry

__all__ = ["diff", "expected"]


def _through(c: Carry, seen: Seen | None) -> Seen | None:
    if seen is None or isinstance(c, Absent):
        return None
    return c.shows(seen) if isinstance(c, Degraded) else seen


def expected(front: FrontColumn, back: BackRow, kind: Kind) -> Seen | None:
    """None when the back or the front cannot carry the kind at all (the cell is not run)."""
    seen = _through(carry(front.carries, kind.name), _through(carry(back.carries, kind.name), kind.expect))
    if seen is not None and seen.usage:
        usage = _through(carry(front.carries, "usage"), _through(carry(back.carries, "usage"), seen))
        seen = msgspec.structs.replace(seen, usage=usage is not None and usage.usage)
    return seen


def _json_suffix(text: str) -> tuple[Any, str] | None:
    """A JSON object or array that ends the text (a headless result comes last), and the rest."""
    for i in (i for i, c in enumerate(text) if c in "{["):
        try:
            value, end = json.JSONDecoder().raw_decode(text, i)
        except ValueError:
            continue
        if end == len(text):
            return value, text[:i].rstrip("\n")
    return None


def _canon_text(text: str) -> str:
    """A JSON value at the start (or the end) of the text, first and in one canonical form:
    its formatting, and where in the run a data item falls, are free."""
    got = json_prefix(text) or _json_suffix(text.rstrip())
    if got is None:
        return text
    return json.dumps(got[0], sort_keys=True) + "\n" + got[1]


def _norm(kind: Kind, seen: Seen, want: Seen) -> dict[str, Any]:
    out = msgspec.to_builtins(seen)
    out["text"] = _canon_text(seen.text)
    # Option ids differ per protocol (chat: indexes); a permission's prompt is the tool
    # call's in ACP (RequestPermissionRequest has no text of its own).
    out["asked"] = [{**a, "options": [[o["label"], o.get("kind")] for o in a["options"]], "prompt": a["prompt"] if a["kind"] != "permission" else ""}
                    for a in out["asked"]]  # fmt: skip
    out["data"] = [json.dumps(v, sort_keys=True) for v in seen.data]  # 42 and 42.0 differ
    if kind.cancel_after_first_chunk and re.fullmatch(r"(tick \d+\. )*", seen.text[len(want.text) :]) and seen.text.startswith(want.text):
        out["text"] = want.text  # the ticks before the cancel landed: how many is timing
    if want.error is not None and seen.error is not None and want.error in seen.error:
        out["error"] = want.error
    return out


def diff(kind: Kind, want: Seen, seen: Seen) -> dict[str, tuple[Any, Any]]:
    """{field: (expected, seen)} for every field that differs."""
    a, b = _norm(kind, want, want), _norm(kind, seen, want)
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}
