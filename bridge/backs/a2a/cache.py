"""The agent-card cache of one A2A back: HTTP freshness and revalidation rules, no I/O.

A card is fresh for `max-age` (minus `Age`) when the agent sends `Cache-Control`,
else for the route's `card_ttl_s`; `no-cache` means revalidate every time and
`no-store` means keep nothing. A stale card is revalidated with `If-None-Match`
when the agent gave an `ETag` (a2a-sdk sends a weak one), so an unchanged card
costs a 304 and no parsing (RFC 9111 §4.2–4.3, RFC 9110 §13.1.2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["CardCache", "freshness"]

_DIRECTIVE = re.compile(r"\s*([A-Za-z-]+)\s*(?:=\s*\"?([^\",]*)\"?)?\s*(?:,|$)")


def freshness(headers: Mapping[str, str], default_ttl_s: float) -> float | None:
    """Seconds a response stays fresh; None when it must not be stored at all."""
    cc = headers.get("cache-control")
    if cc is None:
        return default_ttl_s
    directives = {m.group(1).lower(): m.group(2) for m in _DIRECTIVE.finditer(cc) if m.group(1)}
    if "no-store" in directives:
        return None
    if "no-cache" in directives:
        return 0.0
    max_age = _delta_seconds(directives.get("max-age"))
    if max_age is None:
        return default_ttl_s
    age = _delta_seconds(headers.get("age")) or 0
    return max(0.0, float(max_age - age))


def _delta_seconds(text: str | None) -> int | None:
    """RFC 9111 §1.2.2: ASCII digits, anything above 2**31 read as 2**31. Not
    str.isdigit(), which lets "²" through to int(), which refuses it."""
    text = (text or "").strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    return 2**31 if len(text) > 10 else min(int(text), 2**31)


class CardCache:
    __slots__ = ("default_ttl_s", "url", "body", "etag", "expires_at", "fetches", "revalidations")

    def __init__(self, default_ttl_s: float) -> None:
        self.default_ttl_s = default_ttl_s
        self.url: str | None = None  # where the card was found
        self.body: bytes | None = None
        self.etag: str | None = None
        self.expires_at = 0.0
        self.fetches = 0  # full 200 responses (for tests and `doctor`)
        self.revalidations = 0  # 304 responses

    def fresh(self, now: float) -> bool:
        return self.body is not None and now < self.expires_at

    def conditional_headers(self) -> dict[str, str]:
        return {"If-None-Match": self.etag} if self.body is not None and self.etag else {}

    def stored(self, url: str, body: bytes, headers: Mapping[str, str], now: float) -> None:
        """A 200: keep the card (unless `no-store`)."""
        self.fetches += 1
        ttl = freshness(headers, self.default_ttl_s)
        self.url = url
        self.body = body
        self.etag = headers.get("etag") if ttl is not None else None
        self.expires_at = now + (ttl or 0.0)

    def revalidated(self, headers: Mapping[str, str], now: float) -> None:
        """A 304: the card we hold is current; its new freshness comes with the 304."""
        self.revalidations += 1
        ttl = freshness(headers, self.default_ttl_s)
        self.expires_at = now + (ttl or 0.0)
        if headers.get("etag"):
            self.etag = headers["etag"]
