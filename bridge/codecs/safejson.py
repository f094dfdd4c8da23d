"""Total JSON decoding: any bytes give a value or `msgspec.DecodeError`, nothing else.

msgspec's decoders are fast and strict, but three inputs make them (or what later
handles their result) raise something other than `DecodeError`:

- invalid UTF-8 inside a string raises `UnicodeDecodeError`;
- deep nesting raises `RecursionError` (and a value a little under msgspec's own limit
  makes every later walk over it, an encoder's included, recurse just as deep);
- integers are decoded exactly whatever their size, and one outside 64 bits later
  raises `OverflowError` from the MessagePack encoder the store uses.

`Decoder` wraps `msgspec.json.Decoder` and maps all three to `DecodeError` (a
`ValidationError` from the type stays a `ValidationError`, itself a `DecodeError`).
The whole text must be UTF-8 (RFC 8259 §8.1), not only the strings msgspec reads: a
field it skips or keeps as `msgspec.Raw` would otherwise carry invalid bytes on to a
later decode, the store or another peer. Every scan here is linear in the input: an
unterminated string runs to the end of the input instead of being retried at each
later quote, and an integer's size is judged by its digits (Python's `int()` refuses
more than 4300 of them).
Depth and integer checks cost two `bytes.count` calls and one regular-expression scan
on the common path; the exact scans run only when those find something to look at.
`MAX_DEPTH` is set once at start-up from `[server] max_json_depth` (`configure`).
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

import msgspec

__all__ = ["DEFAULT_MAX_DEPTH", "Decoder", "check", "configure", "decode", "max_depth"]

T = TypeVar("T")

DEFAULT_MAX_DEPTH = 64
_state = {"max_depth": DEFAULT_MAX_DEPTH}

# A string token (so that brackets and digits inside strings are skipped) or a bracket.
# The closing quote is optional and a backslash may end the input: a string always
# matches, so an unterminated one is never rescanned from each later quote (which made
# `"\"\"\"...` quadratic).
_STRING = rb'"(?:[^"\\]++|\\.?)*+"?'  # possessive: a run of plain bytes is one step, ~20x faster
_TOKENS = re.compile(_STRING + rb"|[\[\]{}]", re.DOTALL)
# 19 digits or more: the only integers that can fall outside [-2**63, 2**64 - 1].
_LONG_DIGITS = re.compile(rb"\d{19}")
# A whole integer token: not a float's fraction or exponent.
_NUMBER_TOKENS = re.compile(_STRING + rb"|(?<![\d.eE+-])-?\d{19,}(?![.eE\d])", re.DOTALL)
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_MAX_DIGITS = len(str(_INT_MAX))  # more digits than this is out of range, no int() needed


def configure(*, max_depth: int) -> None:
    """Set the nesting bound for every decoder in this process (start-up only)."""
    _state["max_depth"] = max_depth


def max_depth() -> int:
    return _state["max_depth"]


def _depth_exceeds(data: bytes, limit: int) -> bool:
    depth = 0
    for m in _TOKENS.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif c in (b"]", b"}"):
            depth -= 1
    return False


def _int_out_of_range(data: bytes) -> bytes | None:
    for m in _NUMBER_TOKENS.finditer(data):
        tok = m.group()
        if tok[:1] == b'"':
            continue
        if len(tok.lstrip(b"-")) > _MAX_DIGITS or not _INT_MIN <= int(tok) <= _INT_MAX:
            return tok
    return None


def check(data: bytes | bytearray | memoryview | msgspec.Raw) -> None:
    """Raise `msgspec.DecodeError` if `data` is not UTF-8, nests deeper than the bound
    or holds an integer outside 64 bits. Cheap when none of these can be the case."""
    if not isinstance(data, bytes):
        data = bytes(data)
    if not data.isascii():
        try:
            data.decode()
        except UnicodeDecodeError as exc:
            raise msgspec.DecodeError(f"invalid UTF-8 at byte {exc.start}") from exc
    limit = _state["max_depth"]
    if data.count(b"[") + data.count(b"{") > limit and _depth_exceeds(data, limit):
        raise msgspec.DecodeError(f"JSON nested deeper than {limit} levels")
    if _LONG_DIGITS.search(data) is not None:
        tok = _int_out_of_range(data)
        if tok is not None:
            shown = tok[:24].decode() + ("…" if len(tok) > 24 else "")
            raise msgspec.DecodeError(f"integer {shown} is outside the 64-bit range")


class Decoder(Generic[T]):
    """`msgspec.json.Decoder(type)` whose `decode` raises only `msgspec.DecodeError`."""

    __slots__ = ("_dec", "type")

    def __init__(self, type: Any = Any) -> None:
        self.type = type
        self._dec: msgspec.json.Decoder[T] = msgspec.json.Decoder(type)

    def decode(self, data: bytes | bytearray | memoryview | msgspec.Raw | str) -> T:
        if isinstance(data, str):
            try:
                data = data.encode()
            except UnicodeEncodeError as exc:  # a lone surrogate
                raise msgspec.DecodeError(f"invalid text: {exc.reason}") from exc
        check(data)
        try:
            return self._dec.decode(data)
        except UnicodeDecodeError as exc:
            raise msgspec.DecodeError(f"invalid UTF-8 at byte {exc.start}") from exc
        except RecursionError as exc:
            raise msgspec.DecodeError("JSON nested too deep") from exc


_decoders: dict[Any, Decoder[Any]] = {Any: Decoder()}


def decode(data: bytes | bytearray | memoryview | msgspec.Raw | str, *, type: Any = Any) -> Any:
    """`msgspec.json.decode`, total; the decoder for each type is built once."""
    dec = _decoders.get(type)
    if dec is None:
        dec = _decoders[type] = Decoder(type)
    return dec.decode(data)
