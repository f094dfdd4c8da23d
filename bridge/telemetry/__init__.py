"""Tracing: one span per turn and its children, W3C trace context in and out of every
protocol, as one-line calls that cost nothing when tracing is off.

Every layer may import this package (like `bridge.logs`); it imports only the standard
library. `setup(config.telemetry)` installs the OpenTelemetry implementation
(`bridge/telemetry/otel.py`, which needs the `agent-bridge[otel]` extra) when `[telemetry]
enabled` is set; otherwise every call below is a no-op on `OFF` and no `opentelemetry`
module is ever imported.

The seams, each one line where it sits:

- a front hands what its client sent to `incoming(front, *carriers)` right before
  `begin_turn` (HTTP headers, ACP/MCP `_meta`, a chat:send's fields): the next turn this
  task starts is a child of that context (`Session.start_turn` reads it once, in the same
  task, synchronously);
- the session makes the turn's span (`start_turn`) and keeps it on the turn (`Turn.trace`):
  a turn moves between tasks (the front's, the session's, a back's reader), and trio copies
  the context into each task at spawn, so the span travels explicitly with the turn, never
  through an implicit current context;
- whatever runs for the turn opens children on it (`turn.trace.child(...)`), and a back
  puts `turn.trace.carrier()` (`traceparent`, `tracestate`) on what it sends.

A carrier is untrusted input: `carrier_from` keeps at most a well-formed `traceparent` and
a bounded `tracestate` (W3C Trace Context §3.2, §3.3), whatever the mapping holds.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

from bridge.telemetry.base import OFF, Span, TurnTrace, carrier_from

__all__ = [
    "OFF",
    "Span",
    "TurnTrace",
    "carrier_from",
    "connection",
    "enabled",
    "exemplar",
    "incoming",
    "install",
    "setup",
    "shutdown",
    "start_turn",
    "uninstall",
]


class _Tracing(Protocol):
    """What `bridge/telemetry/otel.py` installs."""

    def start_turn(self, parent: dict[str, str] | None, front: str, attributes: dict[str, str]) -> TurnTrace: ...

    def shutdown(self) -> None: ...


log = logging.getLogger("bridge.telemetry")

_tracing: _Tracing | None = None
_trust_incoming = True
# What the client of the current task sent (front name, carrier), read once by the next
# turn this task starts (`start_turn`), then cleared.
_incoming: contextvars.ContextVar[tuple[str, dict[str, str] | None] | None] = contextvars.ContextVar(
    "agent_bridge_trace_incoming", default=None
)
# A long-lived connection's own context (the /ws upgrade request's headers), set in its
# reader task: the parent of its turns whose command carries none of its own.
_connection: contextvars.ContextVar[tuple[str, dict[str, str] | None] | None] = contextvars.ContextVar(
    "agent_bridge_trace_connection", default=None
)


def enabled() -> bool:
    return _tracing is not None


def incoming(front: str, *carriers: Mapping[str, Any] | None, scope: Mapping[str, Any] | None = None) -> None:
    """The client of this task is about to start a turn through `front`; `carriers` (a
    `_meta` object, a command's fields) and then the HTTP headers of the ASGI `scope` are
    where it may have put its trace context: the first valid one wins."""
    if _tracing is None:
        return
    _incoming.set((front, _first(carriers, scope)))


def connection(front: str, scope: Mapping[str, Any]) -> None:
    """A long-lived connection (a WebSocket) opened with these headers: the parent of the
    turns it starts whose own command names none. Set in the connection's reader task."""
    if _tracing is None:
        return
    _connection.set((front, _first((), scope)))


def _first(carriers: tuple[Mapping[str, Any] | None, ...], scope: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not _trust_incoming:
        return None
    for source in carriers:
        found = carrier_from(source)
        if found is not None:
            return found
    if scope is None:
        return None
    headers: dict[str, str] = {}
    for key, value in scope.get("headers", ()):  # bounded by the server's header limits
        if key in (b"traceparent", b"tracestate"):
            headers[key.decode()] = value.decode("latin-1")
    return carrier_from(headers)


def start_turn(*, route: str, session: str, turn: str, back: Any) -> TurnTrace:
    """The span of a turn starting now (`OFF` when tracing is off), the child of what the
    current task's client sent (`incoming`), which is used once. `back`: the route's back
    config (a Struct tagged with its `kind`)."""
    if _tracing is None:
        return OFF
    config = getattr(type(back), "__struct_config__", None)
    back = str(getattr(config, "tag", None) or type(back).__name__)
    sent = _incoming.get()
    if sent is not None:
        _incoming.set(None)
    front, parent = sent if sent is not None else ("internal", None)
    conn = _connection.get() if parent is None else None
    if conn is not None:
        front, parent = (front if sent is not None else conn[0]), conn[1]
    attributes = {"agent_bridge.route": route, "agent_bridge.session": session, "agent_bridge.turn": turn, "agent_bridge.back": back}
    try:
        return _tracing.start_turn(parent, front, attributes)
    except Exception:  # tracing is never a reason for a turn to fail (STYLE.md rule 17): our bug, logged
        log.exception("the span of turn %s could not be started; the turn runs untraced", turn)
        return OFF


def exemplar(trace: TurnTrace) -> dict[str, str] | None:
    """The exemplar labels linking a metric sample to its turn's trace (OpenMetrics)."""
    return {"trace_id": trace.trace_id, "span_id": trace.span_id} if trace.trace_id else None


def install(tracing: _Tracing, *, trust_incoming: bool = True) -> None:
    """Use `tracing` from now on (`setup` does this; tests install one on a memory exporter)."""
    global _tracing, _trust_incoming
    _tracing, _trust_incoming = tracing, trust_incoming


def uninstall() -> None:
    global _tracing
    _tracing = None


def setup(config: Any) -> bool:
    """Turn tracing on as `config` (`[telemetry]`, bridge/telemetry/config.py) says.

    Off unless `enabled`; the exporter, sampler and service name come from the standard
    `OTEL_*` variables. Raises ImportError (with what to install) when the `otel` extra
    is missing. True if tracing is on."""
    if not config.enabled or _tracing is not None:
        return _tracing is not None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":  # OpenTelemetry SDK environment variables
        return False
    try:
        from bridge.telemetry.otel import OtelTracing
    except ImportError as exc:
        raise ImportError(
            "[telemetry] enabled needs the OpenTelemetry packages: pip install 'agent-bridge[otel]'"
        ) from exc
    install(OtelTracing.from_environment(flush_span_min_ms=config.flush_span_min_ms), trust_incoming=config.trust_incoming)
    return True


def shutdown() -> None:
    """Export what is buffered and stop (the daemon's exit; also registered at exit)."""
    if _tracing is not None:
        _tracing.shutdown()
