"""The OpenTelemetry implementation of bridge/telemetry (the `agent-bridge[otel]` extra).

Imported only by `bridge.telemetry.setup` when `[telemetry] enabled` is set. Configured
the standard way, by the SDK itself: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
(the service is `agent-bridge` when neither names it), `OTEL_TRACES_SAMPLER` and its
argument, `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `_HEADERS`,
`_TIMEOUT` and the rest of the OTLP/HTTP exporter's variables, `OTEL_BSP_*` for the batch
processor, `OTEL_ATTRIBUTE_*` and `OTEL_SPAN_*` limits. `OTEL_TRACES_EXPORTER` picks
`otlp` (the default: OTLP over HTTP with protobuf), `console` or `none`.

Spans are exported by the SDK's `BatchSpanProcessor` from its own thread: ending a span
appends it to a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, spans past it are dropped and
counted by the SDK), so the event loop never waits for the collector.

Error descriptions go through the log redaction (bridge/logs.py `redact`): what a log
line would not show, a span does not either. Every span is started with an explicit parent context, never the implicit current one:
trio copies contextvars into each task at spawn, and a turn runs across tasks (the
front's, the session's, a back's reader), so the context travels on the turn
(`Turn.trace`, this module's `OtelTurnTrace`). The propagator is W3C Trace Context
(`traceparent`, `tracestate`) only: `OTEL_PROPAGATORS` is not read, so a client's
baggage is never forwarded to a back.
"""

from __future__ import annotations

import logging
import os
import time
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, Tracer, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from bridge import __version__
from bridge.logs import redact
from bridge.telemetry.base import TurnTrace

__all__ = ["OtelTracing", "OtelTurnTrace"]

log = logging.getLogger("bridge.telemetry")

_PROPAGATOR = TraceContextTextMapPropagator()
_Value = str | int | float | bool | None


def _clean(attributes: dict[str, _Value]) -> dict[str, str | int | float | bool]:
    return {k if "." in k else f"agent_bridge.{k}": v for k, v in attributes.items() if v is not None}


class _Child:
    """One child span of a turn, open while its `with` block runs."""

    __slots__ = ("_attributes", "_kind", "_name", "_owner", "_parent", "_span", "_tracer")

    def __init__(self, owner: OtelTurnTrace | None, tracer: Tracer, name: str, parent: Context, kind: SpanKind, attributes: dict[str, _Value]) -> None:
        self._owner = owner  # set for the back's call: `carrier()` names it while it is open
        self._name, self._parent, self._kind, self._attributes = name, parent, kind, attributes
        self._span: OtelSpan = trace.INVALID_SPAN
        self._tracer = tracer

    def __enter__(self) -> _Child:
        try:
            attributes = _clean(self._attributes) if self._attributes else None
            self._span = self._tracer.start_span(self._name, context=self._parent, kind=self._kind, attributes=attributes)
            if self._owner is not None:
                self._owner._back = trace.set_span_in_context(self._span, Context())
        except Exception:
            _failed(self._name)
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._owner is not None:
                self._owner._back = None
            if e is not None and isinstance(e, Exception):
                self._span.set_status(Status(StatusCode.ERROR, redact(f"{type(e).__name__}: {e}")[:512]))
                self._span.set_attribute("error.type", type(e).__name__)
            self._span.end()
        except Exception:
            _failed(self._name)

    def set(self, **attributes: _Value) -> None:
        try:
            self._span.set_attributes(_clean(attributes))
        except Exception:
            _failed(self._name)


class _Flush:
    """A store flush of a turn: timed, added up on the turn; a span only when it took at
    least the turn's `flush_span_min_ns` or failed (a span costs ~40 µs of CPU all told,
    a fast flush is most turns' third span: bench/a2a_front.py --tracing)."""

    __slots__ = ("_events", "_owner", "_start")

    def __init__(self, owner: OtelTurnTrace, events: int) -> None:
        self._owner, self._events, self._start = owner, events, 0

    def __enter__(self) -> _Flush:
        self._start = time.time_ns()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        end = time.time_ns()
        owner = self._owner
        owner._flush_ns += end - self._start
        if end - self._start < owner._flush_span_min_ns and e is None:
            return
        try:
            span = owner._tracer.start_span("store.flush", context=owner._ctx, start_time=self._start, attributes={"agent_bridge.events": self._events})
            if e is not None:
                span.set_status(Status(StatusCode.ERROR, redact(f"{type(e).__name__}: {e}")[:512]))
                span.set_attribute("error.type", type(e).__name__)
            span.end(end_time=end)
        except Exception:
            _failed("store.flush")

    def set(self, **attributes: _Value) -> None:
        pass


class OtelTurnTrace(TurnTrace):
    """A traced turn: its SERVER span, the context its children start from, and the
    back's call while it runs (whose context `carrier()` sends on)."""

    __slots__ = ("_back", "_back_name", "_ctx", "_flush_ns", "_flush_span_min_ns", "_span", "_tracer", "span_id", "trace_id")

    def __init__(self, tracer: Tracer, span: OtelSpan, back: str, flush_span_min_ns: int = 0) -> None:
        self._tracer = tracer
        self._back_name = f"back {back}"
        self._span = span
        self._ctx = trace.set_span_in_context(span, Context())
        self._back: Context | None = None
        self._flush_ns, self._flush_span_min_ns = 0, flush_span_min_ns
        sc = span.get_span_context()
        sampled = sc.is_valid and sc.trace_flags.sampled
        self.trace_id = format(sc.trace_id, "032x") if sampled else ""
        self.span_id = format(sc.span_id, "016x") if sampled else ""

    def child(self, name: str, **attributes: _Value) -> _Child:
        return _Child(None, self._tracer, name, self._ctx, SpanKind.INTERNAL, attributes)

    def back(self) -> _Child:
        return _Child(self, self._tracer, self._back_name, self._ctx, SpanKind.CLIENT, {})

    def flush(self, events: int) -> _Flush:
        return _Flush(self, events)

    # Each method is its own boundary (STYLE.md rule 17): a tracing fault is logged and the
    # turn goes on untouched (`end` runs just before a turn's waiters are woken).
    def note(self, **attributes: _Value) -> None:
        try:
            clean = _clean(attributes)
            if clean:
                target = trace.get_current_span(self._back) if self._back is not None else self._span
                target.set_attributes(clean)
        except Exception:
            _failed("note")

    def event(self, name: str, **attributes: _Value) -> None:
        try:
            self._span.add_event(name, _clean(attributes) if attributes else None)
        except Exception:
            _failed(name)

    def carrier(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            _PROPAGATOR.inject(out, context=self._back if self._back is not None else self._ctx)
        except Exception:
            _failed("carrier")
            return {}
        return out

    def end(self, stop_reason: str, error_kind: str | None = None, error: str | None = None) -> None:
        try:
            span = self._span
            # Two attributes, one call: each attribute set costs the SDK ~2 µs.
            span.set_attributes({"agent_bridge.stop_reason": stop_reason, "agent_bridge.store_flush_s": self._flush_ns / 1e9})
            if error is not None:
                span.set_attribute("error.type", error_kind or "error")
                span.set_status(Status(StatusCode.ERROR, redact(error)[:512]))  # as in a log line: no secret
            span.end()
        except Exception:
            _failed("turn end")

    def log_ids(self) -> dict[str, str]:
        return {"trace_id": self.trace_id, "span_id": self.span_id} if self.trace_id else {}


class _Resource(Resource):
    """The SDK's resource with its hash computed once. The OTLP encoder files every span
    it exports under its resource (a dict keyed by it), and `Resource.__hash__` serialises
    all the attributes to JSON each time: ~2 µs a span, a tenth of the export's encoding
    (bench/a2a_front.py --tracing). A resource never changes once made (its attributes
    are immutable), so neither does its hash; equality stays the SDK's."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class _DroppedTurn(TurnTrace):
    """A turn its sampler dropped: nothing of it is recorded, so it opens no child spans.
    Each sampler the SDK ships (`OTEL_TRACES_SAMPLER`) would drop them too (the
    parent-based ones follow the parent, `traceidratio` decides again on the same trace
    id, `always_off` drops everything; a custom sampler that would keep a child of a
    dropped parent is not followed), and each SDK span, recorded or not, goes through
    the sampler (a dropped turn's calls: 10.9 → 4.4 µs in one process). What its back
    sends still names it, unsampled, so the next hop keeps the decision (W3C Trace
    Context §3.2.2.5)."""

    __slots__ = ("_ctx",)

    def __init__(self, span: OtelSpan) -> None:
        self._ctx = trace.set_span_in_context(span, Context())

    def carrier(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            _PROPAGATOR.inject(out, context=self._ctx)
        except Exception:
            _failed("carrier")
            return {}
        return out


class OtelTracing:
    """The tracer every turn's span comes from (installed by `bridge.telemetry.setup`)."""

    def __init__(self, provider: TracerProvider, *, flush_span_min_ms: float = 0.0) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("agent-bridge", __version__)
        self.flush_span_min_ns = int(flush_span_min_ms * 1e6)

    @classmethod
    def from_environment(cls, *, flush_span_min_ms: float = 0.0) -> OtelTracing:
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "agent-bridge"}))
        provider = TracerProvider(resource=_Resource(resource))  # the sampler from OTEL_TRACES_SAMPLER
        exporter = _exporter()
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, flush_span_min_ms=flush_span_min_ms)

    @classmethod
    def with_processor(cls, processor: SpanProcessor, *, flush_span_min_ms: float = 0.0, **provider: Any) -> OtelTracing:
        """On a processor of the caller's (tests: a SimpleSpanProcessor over an InMemorySpanExporter)."""
        tp = TracerProvider(shutdown_on_exit=False, **provider)
        tp.add_span_processor(processor)
        return cls(tp, flush_span_min_ms=flush_span_min_ms)

    def start_turn(self, parent: dict[str, str] | None, front: str, attributes: dict[str, str]) -> TurnTrace:
        ctx = _remote(parent) if parent else Context()
        attributes = {**attributes, "agent_bridge.front": front}
        span = self.tracer.start_span(f"turn {attributes['agent_bridge.route']}", context=ctx, kind=SpanKind.SERVER, attributes=attributes)
        if not span.is_recording():
            return _DroppedTurn(span)
        return OtelTurnTrace(self.tracer, span, attributes["agent_bridge.back"], self.flush_span_min_ns)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _failed(what: str) -> None:
    log.exception("tracing: %s failed; the turn goes on", what)  # our bug (or the SDK's), never the turn's


def _remote(carrier: dict[str, str]) -> Context:
    """The client's span as a parent: `carrier` was validated by `carrier_from` (W3C Trace
    Context §3.2: version 2, trace id 32, parent id 16, flags 2 hex digits), so it is read
    by position rather than parsed again by the SDK's propagator."""
    tp = carrier["traceparent"]
    state = carrier.get("tracestate")
    sc = SpanContext(
        trace_id=int(tp[3:35], 16), span_id=int(tp[36:52], 16), is_remote=True,
        trace_flags=TraceFlags(int(tp[53:55], 16)), trace_state=TraceState.from_header([state]) if state else None,
    )  # fmt: skip
    return trace.set_span_in_context(NonRecordingSpan(sc), Context())


def _exporter() -> SpanExporter | None:
    """What `OTEL_TRACES_EXPORTER` names (OpenTelemetry SDK environment variables)."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    if "none" in names or not names:
        return None
    if "console" in names:
        return ConsoleSpanExporter()
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; exporting OTLP over HTTP (http/protobuf)", protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
