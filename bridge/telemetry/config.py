"""`[telemetry]`: what the standard `OTEL_*` variables cannot say (README.md, "Tracing").

The exporter, its endpoint and headers, the sampler and the service name are read from
the standard environment variables by the OpenTelemetry SDK (bridge/telemetry/otel.py);
this section only turns tracing on and says whom to trust.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["TelemetryConfig"]


class TelemetryConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Trace turns (needs the `agent-bridge[otel]` extra). Off: no OpenTelemetry module is
    # imported and every trace call is a no-op.
    enabled: bool = False
    # Continue the trace a client sends (`traceparent` in A2A and MCP HTTP headers, ACP and
    # MCP `_meta`, a chat:send's fields or the /ws upgrade headers). Off for clients you do
    # not trust: they then cannot pick trace ids or force sampling; each turn starts a trace.
    trust_incoming: bool = True
    # A store flush becomes a child span of its turn when it took at least this long (or
    # failed); the time of every flush adds up on the turn span (`agent_bridge.store_flush_s`).
    # 0: a span for every flush, at ~40 µs of CPU each.
    flush_span_min_ms: Annotated[float, msgspec.Meta(ge=0)] = 5.0
