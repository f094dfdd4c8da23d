"""The exporter `[telemetry]` uses for `OTEL_TRACES_EXPORTER=otlp` (the default): the
official OTLP/HTTP exporter with its request body written by bridge/telemetry/otlp.py.
Imported by bridge/telemetry/otel.py only when it is the exporter (it brings the HTTP
client with it)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from bridge.telemetry import otlp

__all__ = ["OTLPExporter"]

log = logging.getLogger("bridge.telemetry")


class OTLPExporter(OTLPSpanExporter):
    """The official OTLP/HTTP exporter (endpoint, headers, TLS, compression, timeout and
    retries from the `OTEL_EXPORTER_OTLP_*` variables, its HTTP client) with its request
    body written by bridge/telemetry/otlp.py, ~4× faster than the official encoder; the
    encoding was most of what a traced turn cost (bench/a2a_front.py --tracing).

    It hands the body to the exporter's HTTP client (`_client.export(bytes)`, the seam the
    official `export` itself uses). That attribute is private: where an SDK release has
    none, or for a batch the encoder declines (`otlp.Unsupported`), the official `export`
    runs instead, the same message more slowly; tests/test_otlp_encoding.py fails then,
    so the upgrade is noticed. The exporter's own metrics
    (`OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`) count only the official path's batches."""

    fast_exports = 0  # batches this encoder wrote (tests)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        send = getattr(getattr(self, "_client", None), "export", None)
        if send is None or getattr(self, "_shutdown", True):
            return super().export(spans)
        try:
            body = otlp.encode(spans)
        except otlp.Unsupported:
            return super().export(spans)
        except Exception:  # our bug: the official encoder still gets the batch
            log.exception("tracing: the OTLP writer failed on a batch of %d spans; the official encoder exports it", len(spans))
            return super().export(spans)
        limit = getattr(self, "_max_request_size", None)  # the official export's check (OTLP/HTTP, 64 MiB by default)
        if isinstance(limit, int) and 0 < limit < len(body):
            log.warning("tracing: dropping a batch of %d spans: %d bytes, more than the exporter's max_request_size %d", len(spans), len(body), limit)
            return SpanExportResult.FAILURE
        self.fast_exports += 1
        sent = send(body)  # retries, backs off and logs a failure itself
        return SpanExportResult.SUCCESS if getattr(sent, "success", False) else SpanExportResult.FAILURE
