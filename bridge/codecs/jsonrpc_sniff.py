"""The JSON-RPC `id`, `method` and `params.sessionId` of a frame from its first bytes, sans-I/O.

A line over `max_frame_bytes` is never decoded whole (bridge/codecs/ndjson.py keeps
its first `HEAD_BYTES`); what it belonged to is judged from these few members, so that
the request it answers, the request it is, or the turn it updates fails clearly.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from bridge.codecs import safejson

__all__ = ["sniff_head"]

# JSON tokens, enough to walk the first bytes of a line too long to decode (`sniff_head`).
# A string always matches (its closing quote optional), so an unterminated one is not
# rescanned from every later quote.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.?)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)
_SNIFFED = {(1, None, "id"): "id", (1, None, "method"): "method", (2, "params", "sessionId"): "sessionId"}


def sniff_head(head: bytes) -> dict[str, Any]:
    """The JSON-RPC `id`, `method` and `params.sessionId` of a message, as far as its
    first bytes show them (a line over max_frame_bytes is never decoded whole)."""
    found: dict[str, Any] = {}
    stack: list[tuple[bool, str | None]] = []  # (an object?, the key it sits under)
    key: str | None = None
    want_key = False
    for m in _JSON_TOKEN.finditer(head):
        if m.end() == len(head):
            break  # the last token may be cut short
        tok = m.group()
        c = tok[:1]
        if c in (b"{", b"["):
            stack.append((c == b"{", key))
            key, want_key = None, c == b"{"
        elif c in (b"}", b"]"):
            if not stack:
                break
            key, want_key = stack.pop()[1], False
        elif c == b",":
            want_key = bool(stack) and stack[-1][0]
        elif c != b":":
            try:
                value = safejson.decode(tok)
            except msgspec.DecodeError:
                break
            if want_key:
                key, want_key = (value if isinstance(value, str) else None), False
                continue
            name = _SNIFFED.get((len(stack), stack[-1][1] if stack else None, key or ""))
            if name is not None:
                found.setdefault(name, value)
    return found
