"""The OTLP encoding of bridge/telemetry/otlp.py against the official one: for any span,
what it writes decodes (with the official `opentelemetry-proto`) to the message the
official encoder (`opentelemetry-exporter-otlp-proto-common`) builds; what it cannot write
it declines. And the exporter the daemon uses sends those bytes, through the official
exporter's HTTP client, to a receiver in this test."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from bridge.telemetry import otlp
from bridge.telemetry.otel import OtelTracing
from bridge.telemetry.otlp_export import OTLPExporter

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # any Unicode a protobuf string holds
_SCALAR = st.one_of(
    st.none(), st.booleans(), _TEXT, st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(allow_nan=False), st.binary(max_size=8),
)  # fmt: skip
_VALUE = st.one_of(_SCALAR, st.lists(_SCALAR, max_size=3), st.dictionaries(_TEXT, _SCALAR, max_size=2))
_ATTRIBUTES = st.dictionaries(_TEXT, _VALUE, max_size=5)
_STATE = st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), st.from_regex(r"[a-z0-9]{1,5}", fullmatch=True)), max_size=3, unique_by=lambda kv: kv[0])


def _context(remote: bool = False) -> st.SearchStrategy[SpanContext]:
    return st.builds(
        lambda t, s, f, state: SpanContext(t, s, remote, TraceFlags(f), TraceState(state)),
        st.integers(1, (1 << 128) - 1), st.integers(1, (1 << 64) - 1), st.sampled_from([0, 1]), _STATE,
    )  # fmt: skip


_RESOURCES = [Resource({"service.name": "bridge-eu", "n": 3}), Resource({"service.name": "other"}, "https://schema/1"), Resource({})]
_SCOPES = [InstrumentationScope("agent-bridge", "0.1"), InstrumentationScope("other", None, "https://schema/2", {"a": 1}), None]


@st.composite
def _spans(draw: st.DrawFn) -> ReadableSpan:
    bounded = draw(st.booleans())
    attributes: Any = draw(_ATTRIBUTES)
    if bounded:  # what span limits make: some attributes dropped, counted
        attributes = BoundedAttributes(2, attributes, max_value_len=draw(st.sampled_from([None, 3])))
    events = draw(st.lists(st.builds(Event, _TEXT, st.one_of(st.none(), _ATTRIBUTES), st.integers(0, (1 << 64) - 1)), max_size=2))
    status = draw(st.sampled_from([Status(StatusCode.UNSET), Status(StatusCode.OK), None]) | st.builds(lambda d: Status(StatusCode.ERROR, d), _TEXT))
    parent = draw(st.one_of(st.none(), _context(remote=True), _context(remote=False)))
    return ReadableSpan(
        name=draw(_TEXT), context=draw(_context()), parent=parent, resource=draw(st.sampled_from(_RESOURCES)),
        attributes=attributes, events=events, kind=draw(st.sampled_from(list(SpanKind))), status=status,
        start_time=draw(st.integers(0, (1 << 64) - 1)), end_time=draw(st.integers(0, (1 << 64) - 1)),
        instrumentation_scope=draw(st.sampled_from(_SCOPES)),
    )  # fmt: skip


def _same(ours: bytes, spans: list[ReadableSpan]) -> None:
    official = encode_spans(spans)
    decoded = ExportTraceServiceRequest.FromString(ours)
    # Serialised again by the same library, deterministically: equal bytes, equal messages.
    assert decoded.SerializeToString(deterministic=True) == official.SerializeToString(deterministic=True), (decoded, official)


@settings(max_examples=300)
@given(st.lists(_spans(), max_size=4))
def test_the_encoding_is_the_official_encoders_message(spans: list[ReadableSpan]) -> None:
    _same(otlp.encode(spans), spans)


def test_special_values_are_written_as_the_official_encoder_writes_them() -> None:
    context = SpanContext(1, 2, False, TraceFlags(1))
    for value in (math.inf, -math.inf, -0.0, -(1 << 63), (1 << 63) - 1, -1, 0, "", False, [], {}, b"", "é\u2028"):
        span = ReadableSpan("x", context, attributes={"v": value}, resource=_RESOURCES[0], instrumentation_scope=_SCOPES[0])
        _same(otlp.encode([span]), [span])
    nan = ReadableSpan("x", context, attributes={"v": math.nan}, resource=_RESOURCES[0])
    (kv,) = ExportTraceServiceRequest.FromString(otlp.encode([nan])).resource_spans[0].scope_spans[0].spans[0].attributes
    assert math.isnan(kv.value.double_value)


def test_what_it_cannot_write_it_declines() -> None:
    context = SpanContext(1, 2, False, TraceFlags(1))
    for attributes in ({"big": 1 << 63}, {"obj": object()}):
        with pytest.raises(otlp.Unsupported):
            otlp.encode([ReadableSpan("x", context, attributes=attributes, resource=_RESOURCES[0])])
    with pytest.raises(otlp.Unsupported):
        otlp.encode([ReadableSpan("x", context, links=[Link(SpanContext(3, 4, False))], resource=_RESOURCES[0])])
    # A lone surrogate (not Unicode a protobuf string may hold) is replaced, the span kept.
    span = ReadableSpan("bad \udc80 name", context, attributes={"k": "v\ud800"}, resource=_RESOURCES[0])
    decoded = ExportTraceServiceRequest.FromString(otlp.encode([span])).resource_spans[0].scope_spans[0].spans[0]
    assert decoded.name == "bad \ufffd name" and decoded.attributes[0].value.string_value == "v\ufffd"


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.bodies.append(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", _Receiver.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_the_daemons_exporter_sends_these_bytes_through_the_official_client(receiver: tuple[str, list[bytes]]) -> None:
    """`OTLPExporter` is the official OTLP/HTTP exporter writing its body with this encoder.
    It reaches the official exporter's HTTP client through a private attribute: when an
    SDK release moves it, the exporter falls back to the official encoder (a slower
    export, the same message) and this test fails, so the upgrade is noticed."""
    url, bodies = receiver
    exporter = OTLPExporter(endpoint=url)
    tracing = OtelTracing.with_processor(SimpleSpanProcessor(exporter))
    trace = tracing.start_turn(None, "a2a", {"agent_bridge.route": "demo", "agent_bridge.session": "s", "agent_bridge.turn": "t", "agent_bridge.back": "demo"})
    with trace.back():
        trace.event("first_chunk")
    trace.end("end_turn")
    assert len(bodies) == 2  # the back's span, then the turn's (a simple processor exports each as it ends)
    spans = [ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans[0] for b in bodies]
    assert [s.name for s in spans] == ["back demo", "turn demo"] and spans[0].parent_span_id == spans[1].span_id
    assert exporter.fast_exports == 2  # our encoder wrote both
    # A span it declines goes out through the official encoder, whole.
    context = SpanContext(5, 6, False, TraceFlags(1))
    linked = ReadableSpan("linked", context, links=[Link(SpanContext(7, 8, False))], resource=Resource({}))
    assert exporter.export([linked]) is SpanExportResult.SUCCESS and exporter.fast_exports == 2
    assert ExportTraceServiceRequest.FromString(bodies[-1]) == encode_spans([linked])
    exporter.shutdown()


def test_the_fast_path_keeps_the_official_exports_rules(receiver: tuple[str, list[bytes]]) -> None:
    """A body over the exporter's `max_request_size` is dropped before it is sent (the
    official export's rule; a collector would refuse it whole, with every other turn's
    spans in it); a span the writer fails on, whatever the reason, goes out through the
    official encoder (which drops the attribute it cannot write)."""
    url, bodies = receiver
    context = SpanContext(5, 6, False, TraceFlags(1))
    small = OTLPExporter(endpoint=url, max_request_size=1000)
    assert small.export([ReadableSpan("big", context, attributes={"remote_task": "x" * 5000}, resource=Resource({}))]) is SpanExportResult.FAILURE
    assert bodies == [] and small.fast_exports == 0
    small.shutdown()
    exporter = OTLPExporter(endpoint=url)
    odd = ReadableSpan("odd", context, attributes={5: "an int key", "ok": 1}, resource=Resource({}))  # type: ignore[dict-item]
    assert exporter.export([odd]) is SpanExportResult.SUCCESS and exporter.fast_exports == 0
    (sent,) = ExportTraceServiceRequest.FromString(bodies[-1]).resource_spans[0].scope_spans[0].spans
    assert [kv.key for kv in sent.attributes] == ["ok"]
    exporter.shutdown()
