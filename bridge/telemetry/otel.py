"""The OpenTelemetry implementation of bridge/telemetry (the `agent-bridge[otel]` extra).

Imported only by `bridge.telemetry.setup` when `[telemetry] enabled` is set. Configured
the standard way, by the SDK itself: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`
(the service is `agent-bridge` when neither names it), `OTEL_TRACES_SAMPLER` and its
argument, `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `_HEADERS`,
`_TIMEOUT` and the rest of the OTLP/HTTP exporter's variables, `OTEL_BSP_*` for the batch
processor, the span limits (`OTEL_SPAN_*`, `OTEL_ATTRIBUTE_*`, `OTEL_EVENT_*`).
`OTEL_TRACES_EXPORTER` picks `otlp` (the default: OTLP over HTTP with protobuf),
`console` or `none`.

Spans are exported by the SDK's `BatchSpanProcessor` from its own thread: a finished span
is appended to a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, spans past it are dropped and
counted by the SDK), so the event loop never waits for the collector.

A turn's spans are few and fixed (the turn, its back's call, questions, prompt expansion,
slow store flushes) and each is written by one task, so they are recorded here, not as
the SDK's live `Span` objects: the SDK's sampler decides once per turn, its id generator
makes the ids, and each span is handed, finished, to the processors as the SDK's own
`ReadableSpan` (what `SpanProcessor.on_end` receives from the SDK), with the provider's
resource and the `agent-bridge` instrumentation scope. A SendMessage turn (its span, its
back's, a first-chunk event, a carrier) cost the event loop ~48 µs as the SDK's live spans
(a lock per span and per attribute set, a sampler call and a context per child) and costs
~17 µs recorded here; the batch processor's thread then spends ~15 µs writing it as
OTLP (bridge/telemetry/otlp_export.py, otlp.py; 46 µs with the official encoder;
bench/a2a_front.py --tracing). What that leaves out: `SpanProcessor.on_start` is not
called (the SDK's batch and simple processors do nothing there), and only the
processors this module adds see the spans.

Error descriptions go through the log redaction (bridge/logs.py `redact`): what a log
line would not show, a span does not either. A turn runs across tasks (the front's, the
session's, a back's reader) and trio copies contextvars into each task at spawn, so the
trace travels on the turn (`Turn.trace`, this module's `OtelTurnTrace`), never through an
implicit current context. The propagator is W3C Trace Context (`traceparent`,
`tracestate`) only: `OTEL_PROPAGATORS` is not read, so a client's baggage is never
forwarded to a back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from bridge import __version__
from bridge.logs import redact
from bridge.telemetry.base import TurnTrace

__all__ = ["OtelTracing", "OtelTurnTrace"]

log = logging.getLogger("bridge.telemetry")

_Value = str | int | float | bool | None
_Attributes = dict[str, str | int | float | bool]
_UNSET = Status(StatusCode.UNSET)
_FLAGS = (TraceFlags(TraceFlags.DEFAULT), TraceFlags(TraceFlags.SAMPLED))
_MAX_EVENTS = 1024  # a turn's events when OTEL_SPAN_EVENT_COUNT_LIMIT lifts the SDK's limit


def _clean(attributes: dict[str, _Value]) -> _Attributes:
    return {k if "." in k else f"agent_bridge.{k}": v for k, v in attributes.items() if v is not None}


def _error(e: BaseException) -> Status:
    return Status(StatusCode.ERROR, redact(f"{type(e).__name__}: {e}")[:512])  # as in a log line: no secret


class _Spans:
    """Where finished spans go: the provider's resource and id generator, the span limits
    (the `OTEL_SPAN_*`/`OTEL_ATTRIBUTE_*`/`OTEL_EVENT_*` variables unless given), and the
    processors this module added."""

    __slots__ = ("ids", "limits", "processors", "resource", "scope")

    def __init__(self, provider: TracerProvider, processors: Sequence[SpanProcessor], limits: SpanLimits | None = None) -> None:
        self.resource = provider.resource
        self.ids = provider.id_generator
        self.scope = InstrumentationScope("agent-bridge", __version__)
        self.processors = tuple(processors)
        self.limits = limits or SpanLimits()

    def finish(
        self, name: str, context: SpanContext, parent: SpanContext | None, kind: SpanKind, attributes: _Attributes,
        events: Sequence[Event], status: Status, start: int, end: int,
    ) -> None:  # fmt: skip
        """Hand a finished span to the processors. Its attributes are copied: the span is
        read by the exporter's thread, the dict it was recorded in stays the turn's."""
        limits = self.limits
        attrs: Any = dict(attributes)
        if limits.max_span_attribute_length is not None or (limits.max_span_attributes is not None and len(attrs) > limits.max_span_attributes):
            attrs = BoundedAttributes(limits.max_span_attributes, attrs, max_value_len=limits.max_span_attribute_length)
        span = ReadableSpan(
            name=name, context=context, parent=parent, resource=self.resource, attributes=attrs, events=events, kind=kind,
            status=status, start_time=start, end_time=end, instrumentation_scope=self.scope,
        )  # fmt: skip
        for processor in self.processors:
            processor.on_end(span)

    def event(self, name: str, attributes: _Attributes | None) -> Event:
        limits = self.limits
        bounded: Any = attributes
        if attributes and (limits.max_attribute_length is not None or (limits.max_event_attributes is not None and len(attributes) > limits.max_event_attributes)):
            bounded = BoundedAttributes(limits.max_event_attributes, attributes, max_value_len=limits.max_attribute_length)
        return Event(name, attributes=bounded, timestamp=time.time_ns())


class _Child:
    """One child span of a turn, open while its `with` block runs."""

    __slots__ = ("_attributes", "_kind", "_name", "_owner", "_start", "span_id")

    def __init__(self, owner: OtelTurnTrace, name: str, kind: SpanKind, attributes: _Attributes) -> None:
        self._owner, self._name, self._kind, self._attributes = owner, name, kind, attributes
        self._start, self.span_id = 0, 0

    def __enter__(self) -> _Child:
        try:
            self.span_id = self._owner._spans.ids.generate_span_id()
            self._start = time.time_ns()
            if self._kind is SpanKind.CLIENT:
                self._owner._back = self  # `carrier()` names the back's call while it runs
        except Exception:
            _failed(self._name)
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        owner = self._owner
        try:
            if owner._back is self:
                owner._back = None
            if not self.span_id:
                return  # its start failed (logged there)
            status = _UNSET
            if e is not None and isinstance(e, Exception):
                status = _error(e)
                self._attributes["error.type"] = type(e).__name__
            context = SpanContext(owner._trace_id, self.span_id, False, owner._flags, owner._state)
            owner._spans.finish(self._name, context, owner._context, self._kind, self._attributes, (), status, self._start, time.time_ns())
        except Exception:
            _failed(self._name)

    def set(self, **attributes: _Value) -> None:
        self._attributes.update(_clean(attributes))


class _Flush:
    """A store flush of a turn: timed, added up on the turn; a span only when it took at
    least the turn's `flush_span_min_ns` or failed (most flushes are fast, and a span per
    flush would be most turns' third)."""

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
            attributes: _Attributes = {"agent_bridge.events": self._events}
            status = _UNSET
            if e is not None:
                status = _error(e)
                attributes["error.type"] = type(e).__name__
            context = SpanContext(owner._trace_id, owner._spans.ids.generate_span_id(), False, owner._flags, owner._state)
            owner._spans.finish("store.flush", context, owner._context, SpanKind.INTERNAL, attributes, (), status, self._start, end)
        except Exception:
            _failed("store.flush")

    def set(self, **attributes: _Value) -> None:
        pass


class OtelTurnTrace(TurnTrace):
    """A traced turn: its SERVER span (recorded until `end`), the context its children
    hang off, and the back's call while it runs (which `carrier()` names)."""

    __slots__ = (
        "_attributes", "_back", "_back_name", "_context", "_dropped_events", "_ended", "_events", "_flags", "_flush_ns",
        "_flush_span_min_ns", "_name", "_parent", "_spans", "_start", "_state", "_state_header", "_trace_id", "_traceparent",
        "span_id", "trace_id",
    )  # fmt: skip

    def __init__(
        self, spans: _Spans, name: str, back: str, context: SpanContext, parent: SpanContext | None, attributes: _Attributes,
        flush_span_min_ns: int = 0,
    ) -> None:  # fmt: skip
        self._spans, self._name, self._context, self._parent, self._attributes = spans, name, context, parent, attributes
        self._back_name = f"back {back}"
        self._dropped_events = 0
        self._start = time.time_ns()
        self._trace_id, self._flags, self._state = context.trace_id, context.trace_flags, context.trace_state
        self._back: _Child | None = None
        self._events: list[Event] = []
        self._ended = False
        self._flush_ns, self._flush_span_min_ns = 0, flush_span_min_ns
        sampled = context.trace_flags.sampled
        trace_hex = format(context.trace_id, "032x")
        self._traceparent = (f"00-{trace_hex}-", f"-{context.trace_flags:02x}")  # W3C Trace Context §3.2.2
        self._state_header = context.trace_state.to_header() if context.trace_state else ""
        self.trace_id = trace_hex if sampled else ""
        self.span_id = format(context.span_id, "016x") if sampled else ""

    def child(self, name: str, **attributes: _Value) -> _Child:
        return _Child(self, name, SpanKind.INTERNAL, _clean(attributes))

    def back(self) -> _Child:
        return _Child(self, self._back_name, SpanKind.CLIENT, {})

    def flush(self, events: int) -> _Flush:
        return _Flush(self, events)

    def note(self, **attributes: _Value) -> None:
        (self._back._attributes if self._back is not None else self._attributes).update(_clean(attributes))

    def event(self, name: str, **attributes: _Value) -> None:
        if self._ended:
            return
        events, limit = self._events, self._spans.limits.max_events
        if limit is None:
            limit = _MAX_EVENTS  # unlimited in the SDK; bounded here all the same
        if len(events) >= limit:  # OTEL_SPAN_EVENT_COUNT_LIMIT: the newest are kept, as the SDK keeps them
            self._dropped_events += 1
            if not events:
                return
            del events[0]
        events.append(self._spans.event(name, _clean(attributes) if attributes else None))

    def carrier(self) -> dict[str, str]:
        head, flags = self._traceparent
        span_id = self._back.span_id if self._back is not None and self._back.span_id else self._context.span_id
        out = {"traceparent": f"{head}{span_id:016x}{flags}"}
        if self._state_header:
            out["tracestate"] = self._state_header
        return out

    # `end` is its own boundary (STYLE.md rule 17): a tracing fault is logged and the turn
    # goes on untouched (it runs just before a turn's waiters are woken).
    def end(self, stop_reason: str, error_kind: str | None = None, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            attributes = self._attributes
            attributes["agent_bridge.stop_reason"] = stop_reason
            attributes["agent_bridge.store_flush_s"] = self._flush_ns / 1e9
            status = _UNSET
            if error is not None:
                attributes["error.type"] = error_kind or "error"
                status = Status(StatusCode.ERROR, redact(error)[:512])  # as in a log line: no secret
            events: Sequence[Event] = self._events
            if self._dropped_events:  # counted as the SDK's BoundedList counts them
                bounded = BoundedList(len(events))
                bounded.extend(events)
                bounded.dropped = self._dropped_events
                events = bounded
            self._spans.finish(self._name, self._context, self._parent, SpanKind.SERVER, attributes, events, status, self._start, time.time_ns())
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
    dropped parent is not followed). What its back sends still names it, unsampled, so
    the next hop keeps the decision (W3C Trace Context §3.2.2.5)."""

    __slots__ = ("_carrier",)

    def __init__(self, context: SpanContext) -> None:
        self._carrier = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}
        if context.trace_state:
            self._carrier["tracestate"] = context.trace_state.to_header()

    def carrier(self) -> dict[str, str]:
        return dict(self._carrier)


class OtelTracing:
    """Where every turn's span starts (installed by `bridge.telemetry.setup`): the SDK's
    provider (its sampler, id generator and resource) and the processors spans end in."""

    def __init__(
        self, provider: TracerProvider, processors: Sequence[SpanProcessor], *, flush_span_min_ms: float = 0.0,
        limits: SpanLimits | None = None,
    ) -> None:  # fmt: skip
        self.provider = provider
        self.flush_span_min_ns = int(flush_span_min_ms * 1e6)
        self._spans = _Spans(provider, processors, limits)

    @classmethod
    def from_environment(cls, *, flush_span_min_ms: float = 0.0) -> OtelTracing:
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "agent-bridge"}))
        provider = TracerProvider(resource=_Resource(resource))  # the sampler from OTEL_TRACES_SAMPLER
        exporter = _exporter()
        processors = [BatchSpanProcessor(exporter)] if exporter is not None else []
        for processor in processors:
            provider.add_span_processor(processor)  # its shutdown exports what is queued
        return cls(provider, processors, flush_span_min_ms=flush_span_min_ms)

    @classmethod
    def with_processor(cls, processor: SpanProcessor, *, flush_span_min_ms: float = 0.0, **provider: Any) -> OtelTracing:
        """On a processor of the caller's (tests: a SimpleSpanProcessor over an InMemorySpanExporter)."""
        tp = TracerProvider(shutdown_on_exit=False, **provider)
        tp.add_span_processor(processor)
        return cls(tp, [processor], flush_span_min_ms=flush_span_min_ms, limits=provider.get("span_limits"))

    def start_turn(self, parent: dict[str, str] | None, front: str, attributes: dict[str, str]) -> TurnTrace:
        remote = _remote(parent) if parent else None
        ids = self._spans.ids
        trace_id = remote.trace_id if remote is not None else ids.generate_trace_id()
        name = f"turn {attributes['agent_bridge.route']}"
        attrs: _Attributes = {**attributes, "agent_bridge.front": front}
        # The SDK's own sampler decides, as `Tracer.start_span(context=...)` would have it
        # decide: on the client's span, or on an empty context (never on whatever span
        # another instrumentation left current in this task).
        parent_context = trace.set_span_in_context(NonRecordingSpan(remote), Context()) if remote is not None else Context()
        result = self.provider.sampler.should_sample(parent_context, trace_id, name, SpanKind.SERVER, attrs)
        context = SpanContext(trace_id, ids.generate_span_id(), False, _FLAGS[result.decision.is_sampled()], result.trace_state)
        if not result.decision.is_recording():
            return _DroppedTurn(context)
        attrs = dict(result.attributes)  # the sampler's attributes are the span's (the SDK's rule)
        return OtelTurnTrace(self._spans, name, attributes["agent_bridge.back"], context, remote, attrs, self.flush_span_min_ns)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _failed(what: str) -> None:
    log.exception("tracing: %s failed; the turn goes on", what)  # our bug (or the SDK's), never the turn's


def _remote(carrier: dict[str, str]) -> SpanContext:
    """The client's span: `carrier` was validated by `carrier_from` (W3C Trace Context §3.2:
    version 2, trace id 32, parent id 16, flags 2 hex digits), so it is read by position
    rather than parsed again by the SDK's propagator."""
    tp = carrier["traceparent"]
    state = carrier.get("tracestate")
    return SpanContext(
        trace_id=int(tp[3:35], 16), span_id=int(tp[36:52], 16), is_remote=True,
        trace_flags=TraceFlags(int(tp[53:55], 16)), trace_state=TraceState.from_header([state]) if state else None,
    )  # fmt: skip


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
    from bridge.telemetry.otlp_export import OTLPExporter  # imported only when OTLP is what exports

    return OTLPExporter()
