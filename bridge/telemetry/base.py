"""The no-op turn trace (`OFF`, what every turn carries when tracing is off), the
interface the OpenTelemetry one implements, and the reading of an untrusted carrier.
Standard library only (bridge/telemetry/__init__.py says how the pieces fit)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Protocol

__all__ = ["OFF", "Span", "TurnTrace", "carrier_from"]

# W3C Trace Context §3.2: version-traceid-parentid-flags, lowercase hex; version ff is
# invalid, ids of all zeros are invalid. A later version may append fields ("-..."),
# which a version-00 reader ignores (§3.2.4), so only the first 55 characters count.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.S)
_MAX_TRACEPARENT = 256
# §3.3.1.1: at most 32 list members; vendors should propagate at least 512 characters.
_MAX_TRACESTATE = 512
_MAX_MEMBERS = 32
# §3.3.1.3: key "=" value; a key is simple or tenant@system, lowercase; a value printable
# ASCII without "," or "=", not ending in a space.
_KEY = r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
_MEMBER = re.compile(_KEY + r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def _valid_tracestate(state: str) -> bool:
    """A tracestate the SDK takes without a complaint: well-formed members, each key once,
    at most 32 (an invalid one is dropped and the traceparent kept, §3.3.1.1)."""
    members = [m.strip(" \t") for m in state.split(",")]
    members = [m for m in members if m]
    if not members or len(members) > _MAX_MEMBERS:
        return False
    keys = {m.partition("=")[0] for m in members}
    return len(keys) == len(members) and all(_MEMBER.fullmatch(m) for m in members)


def carrier_from(source: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The W3C fields of an untrusted mapping (HTTP headers, a `_meta` object): a valid
    `traceparent` and, with it, a `tracestate` within bounds; None when there is no valid
    `traceparent` (the turn then starts a trace of its own)."""
    if not source:
        return None
    try:
        parent, state = source.get("traceparent"), source.get("tracestate")
    except Exception:  # a foreign mapping (a client's object) that cannot be read
        return None
    if not isinstance(parent, str) or len(parent) > _MAX_TRACEPARENT:
        return None
    parent = parent.strip()
    m = _TRACEPARENT.fullmatch(parent)
    if m is None:
        return None
    version, trace_id, span_id, _flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    out = {"traceparent": parent[:55]}
    if isinstance(state, str) and 0 < len(state) <= _MAX_TRACESTATE and _valid_tracestate(state):
        out["tracestate"] = state
    return out


class Span(Protocol):
    """A child span while it is open (what `TurnTrace.child` yields)."""

    def set(self, **attributes: str | int | float | bool | None) -> None: ...


class TurnTrace:
    """One turn's span and what hangs off it; this class is the no-op (`OFF`), what every
    turn carries when tracing is off. `bridge/telemetry/otel.py` implements the real one."""

    __slots__ = ()

    trace_id: str = ""  # 32 hex digits when traced
    span_id: str = ""

    def child(self, name: str, **attributes: str | int | float | bool | None) -> AbstractContextManager[Span]:
        """A span under the turn (`with turn.trace.child("question.wait") as span:`)."""
        return _NO_SPAN

    def back(self) -> AbstractContextManager[Span]:
        """The back's call (`back KIND`): while it is open, `carrier()` names it as the parent."""
        return _NO_SPAN

    def flush(self, events: int) -> AbstractContextManager[Span]:
        """A store flush for the turn: its time adds up on the turn, a child span when it was slow
        or failed (`[telemetry] flush_span_min_ms`)."""
        return _NO_SPAN

    def note(self, **attributes: str | int | float | bool | None) -> None:
        """Attributes on the back's call (its remote task or session id)."""

    def event(self, name: str, **attributes: str | int | float | bool | None) -> None:
        """A span event on the turn (`first_chunk`)."""

    def carrier(self) -> dict[str, str]:
        """`traceparent` (and `tracestate`) for what a back sends now: empty when off."""
        return {}

    def end(self, stop_reason: str, error_kind: str | None = None, error: str | None = None) -> None:
        """The turn is over: its stop reason, and the error of a failed turn."""

    def log_ids(self) -> dict[str, str]:
        """`trace_id` and `span_id` for the turn's log lines (bridge/logs.py)."""
        return {}


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def set(self, **attributes: str | int | float | bool | None) -> None:
        pass


_NO_SPAN = _NoSpan()
OFF = TurnTrace()
