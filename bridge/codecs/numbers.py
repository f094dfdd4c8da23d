"""Reading a peer's decimal number from text, totally.

`str.isdigit()` is true for characters `int()` refuses ("²", "①"), and `int()` refuses
strings of more than 4300 digits (Python's integer-string limit) with `ValueError`;
`"²".isdigit() and int("²")` in a codec is then an exception a peer can trigger at
will. `small_int` accepts ASCII digits only, and only as many as fit in 64 bits
(a value that then crosses a store or an encoder cannot overflow it).
"""

from __future__ import annotations

__all__ = ["MAX_DIGITS", "small_int"]

MAX_DIGITS = 18  # every 18-digit decimal fits in a signed 64-bit integer


def small_int(text: str | bytes, *, max_digits: int = MAX_DIGITS) -> int | None:
    """The non-negative integer `text` spells in ASCII digits, or None (anything else:
    a sign, spaces, other scripts' digits, more than `max_digits` digits)."""
    if not text or len(text) > max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)
