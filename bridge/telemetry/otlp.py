"""The body of an OTLP/HTTP trace export (`ExportTraceServiceRequest`, protobuf), written
field by field from the spans bridge/telemetry/otel.py records.

The official encoder (opentelemetry-exporter-otlp-proto-common) builds a Python protobuf
object for every span, attribute and value before serialising them: ~22 µs a span on the
project machine, in the span processor's thread, where it holds the GIL the event loop
needs. The same bytes written directly cost ~6 µs a span (bench/a2a_front.py --tracing).
What is written is checked against that encoder: tests/test_otlp_encoding.py decodes it
with opentelemetry-proto and compares it with the official encoder's message, for any
span hypothesis makes.

What it cannot write as the official encoder would (a span with links, a value OTLP has
no type for, an int outside int64) raises `Unsupported`, and the exporter hands the batch
to the official encoder instead. One difference is deliberate: a string that is not
valid Unicode (a lone surrogate) is written with U+FFFD in its place, where the official
encoder drops the attribute (or the batch, for a span name).

Field numbers: opentelemetry-proto v1, `opentelemetry/proto/trace/v1/trace.proto`,
`common/v1/common.proto`, `resource/v1/resource.proto` and
`collector/trace/v1/trace_service.proto`; the wire format is protobuf's ("Encoding":
varints, fixed64/fixed32 little-endian, length-delimited bytes and messages).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Unsupported", "encode"]


class Unsupported(Exception):
    """A span this encoder does not write (the official encoder then does)."""


_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_FIXED32 = struct.Struct("<I").pack
_SMALL = [bytes((n,)) for n in range(128)]
_INT64 = 1 << 63
_SURROGATE = re.compile("[\ud800-\udfff]")


def _varint(n: int) -> bytes:
    if n < 0x80:
        if n < 0:  # every caller passes a count, a length or a masked int64
            raise Unsupported(f"a negative varint: {n}")
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return tag + _varint(len(body)) + body


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: what a protobuf string cannot hold
        return _SURROGATE.sub("\ufffd", text).encode()


def _any_value(value: Any) -> bytes:
    """The body of an `AnyValue` (common.proto), in the official encoder's order of types."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"  # bool_value = 2
    if isinstance(value, str):
        return _field(b"\x0a", _utf8(value))  # string_value = 1
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise Unsupported(f"int out of int64: {value}")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int_value = 3, two's complement
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)  # double_value = 4
    if isinstance(value, bytes):
        return _field(b"\x3a", value)  # bytes_value = 7
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(v)) for v in value]))  # array_value = 5
    if isinstance(value, Mapping):
        pairs = b"".join([_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()])
        return _field(b"\x32", pairs)  # kvlist_value = 6
    raise Unsupported(f"no OTLP type for {type(value).__name__}")


def _key_value(key: str, value: Any) -> bytes:
    return _field(b"\x0a", _utf8(key)) + _field(b"\x12", _any_value(value))  # key = 1, value = 2


# Written attributes that repeat on every turn (a route, a back, a stop reason), by (field
# tag, key, value); keys whose values are ids are not kept. Bounded, filled while room is left.
_pairs: dict[tuple[bytes, str, str], bytes] = {}
_PAIRS_MAX = 1024
_REPEATED = frozenset({
    "agent_bridge.route", "agent_bridge.back", "agent_bridge.front", "agent_bridge.stop_reason",
    "agent_bridge.question_kind", "agent_bridge.answered_by", "agent_bridge.prompt", "error.type",
})  # fmt: skip


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    out = []
    for key, value in attributes.items():
        if key in _REPEATED and type(value) is str and len(value) <= 64:
            written = _pairs.get((tag, key, value))
            if written is None:
                written = _field(tag, _key_value(key, value))
                if len(_pairs) < _PAIRS_MAX:
                    _pairs[(tag, key, value)] = written
            out.append(written)
        else:
            out.append(_field(tag, _key_value(key, value)))
    return b"".join(out)


def _count(tag: bytes, n: int) -> bytes:
    return tag + _varint(n) if n else b""


def _span(span: Any) -> bytes:
    """The body of a `Span` (trace.proto) from an SDK `ReadableSpan`."""
    if span.links:
        raise Unsupported("a span with links")
    context, parent = span.context, span.parent
    parts = [b"\x0a\x10" + context.trace_id.to_bytes(16, "big"), b"\x12\x08" + context.span_id.to_bytes(8, "big")]
    if context.trace_state:  # trace_state = 3
        parts.append(_field(b"\x1a", _utf8(",".join([f"{k}={v}" for k, v in context.trace_state.items()]))))
    if parent is not None:  # parent_span_id = 4
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    if span.name:  # name = 5
        parts.append(_field(b"\x2a", _utf8(span.name)))
    parts.append(b"\x30" + _SMALL[span.kind.value + 1])  # kind = 6: the SDK's SpanKind + 1 (0 is UNSPECIFIED)
    if span.start_time:  # start_time_unix_nano = 7, end = 8
        parts.append(b"\x39" + _FIXED64(span.start_time))
    if span.end_time:
        parts.append(b"\x41" + _FIXED64(span.end_time))
    parts.append(_attributes(b"\x4a", span.attributes))  # attributes = 9
    parts.append(_count(b"\x50", span.dropped_attributes))  # dropped_attributes_count = 10
    for event in span.events:  # events = 11: time_unix_nano = 1, name = 2, attributes = 3, dropped = 4
        body = (b"\x09" + _FIXED64(event.timestamp) if event.timestamp else b"") + (_field(b"\x12", _utf8(event.name)) if event.name else b"")
        parts.append(_field(b"\x5a", body + _attributes(b"\x1a", event.attributes) + _count(b"\x20", event.dropped_attributes)))
    parts.append(_count(b"\x60", span.dropped_events))  # dropped_events_count = 12
    parts.append(_count(b"\x70", span.dropped_links))  # dropped_links_count = 14
    status = span.status
    if status is not None:  # status = 15: message = 2, code = 3
        message = _field(b"\x12", _utf8(status.description)) if status.description else b""
        parts.append(_field(b"\x7a", message + _count(b"\x18", status.status_code.value)))
    # flags = 16 (fixed32): the parent's remoteness is known (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK), and whether it is
    parts.append(b"\x85\x01" + _FIXED32(0x300 if parent is not None and parent.is_remote else 0x100))
    return b"".join(parts)


def _resource(resource: Any) -> bytes:
    """The `resource` field of a `ResourceSpans`: its attributes (resource.proto)."""
    return _field(b"\x0a", _attributes(b"\x0a", resource.attributes))


def _scope(scope: Any) -> bytes:
    """The `scope` field of a `ScopeSpans` (common.proto `InstrumentationScope`)."""
    if scope is None:
        return b"\x0a\x00"
    body = (_field(b"\x0a", _utf8(scope.name)) if scope.name else b"") + (_field(b"\x12", _utf8(scope.version)) if scope.version else b"")
    return _field(b"\x0a", body + _attributes(b"\x1a", scope.attributes))


# The resource and scope of a process's spans are the same few objects: each is written once.
_written: dict[int, tuple[Any, bytes]] = {}


def _once(obj: Any, write: Any) -> bytes:
    hit = _written.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    if len(_written) >= 64:
        _written.clear()
    data = write(obj)
    _written[id(obj)] = (obj, data)  # the object is kept, so its id is not reused while here
    return data


def encode(spans: Sequence[Any]) -> bytes:
    """`ExportTraceServiceRequest` of `spans` (SDK `ReadableSpan`s), grouped by resource,
    then by instrumentation scope, in the order first seen, as the official encoder groups them."""
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    for span in spans:
        groups.setdefault(span.resource, {}).setdefault(span.instrumentation_scope or None, []).append(_span(span))
    out = []
    for resource, scopes in groups.items():
        body = [_once(resource, _resource)]
        for scope, written in scopes.items():
            scope_spans = _once(scope, _scope) + b"".join([_field(b"\x12", s) for s in written])
            if scope is not None and scope.schema_url:
                scope_spans += _field(b"\x1a", _utf8(scope.schema_url))
            body.append(_field(b"\x12", scope_spans))  # scope_spans = 2
        if resource.schema_url:
            body.append(_field(b"\x1a", _utf8(resource.schema_url)))  # schema_url = 3
        out.append(_field(b"\x0a", b"".join(body)))  # resource_spans = 1
    return b"".join(out)
