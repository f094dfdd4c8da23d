"""The daemon's Prometheus metrics (`GET /metrics`, text format), on prometheus-client.

Counted where it is cheap, never per event on the relay path:
- the session calls the `TurnObserver` methods once per session, turn, back error,
  and once per store flush for the events it delivered (one add per subscriber
  protocol for the whole batch);
- connections are counted when they open and close;
- live sessions, running turns, child processes and the cluster's counts
  (`Cluster.stats()`, bridge/cluster/base.py; none for a daemon alone) are read when scraped.

| metric | labels |
|---|---|
| agent_bridge_sessions_opened_total | route |
| agent_bridge_sessions_live | route |
| agent_bridge_turns_total | route, outcome (the stop reason: end_turn, cancelled, failed, ...) |
| agent_bridge_turns_running | route |
| agent_bridge_turn_duration_seconds (histogram) | route |
| agent_bridge_turn_first_event_seconds (histogram) | route |
| agent_bridge_events_relayed_total | protocol (the front: acp, chat, ...) |
| agent_bridge_back_errors_total | route, kind (BackUnavailable, BackError, timeout, ...) |
| agent_bridge_turns_refused_total | route, reason (route_concurrent_turns, identity_requests_per_minute, ...: `[limits]`), front |
| agent_bridge_child_processes | |
| agent_bridge_open_connections | front (http: requests in flight; each front that counts its own, as it declares: acp: unix socket, ws: WebSocket) |
| agent_bridge_reloads_total | result (ok, failed) |
| agent_bridge_cluster_leases | (several daemons on PostgreSQL: sessions whose live side runs here) |
| agent_bridge_cluster_forwarded_total | (commands this instance sent to a session's owner) |
| agent_bridge_cluster_served_total | (commands other instances sent here) |
| agent_bridge_cluster_forward_failures_total | (forwarded commands the owner did not answer: OwnerGone) |

plus prometheus-client's `process_*` and `python_*` collectors.

With tracing on (bridge/telemetry), each sample of the two turn histograms carries the
turn's `trace_id` and `span_id` as an exemplar. prometheus-client writes exemplars only
in the OpenMetrics exposition, so `/metrics` answers in OpenMetrics when the scraper's
`Accept` asks for `application/openmetrics-text` (Prometheus does, with exemplar storage
on) and in the classic text format otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from bridge.registry import FrontKind

__all__ = ["CONTENT_TYPE", "OPENMETRICS_CONTENT_TYPE", "Metrics", "child_processes", "wants_openmetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
OPENMETRICS_CONTENT_TYPE = openmetrics.CONTENT_TYPE_LATEST
_P = "agent_bridge_"
_TURN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_FIRST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def child_processes(pid: int | None = None) -> int:
    """Processes whose parent is `pid` (default: us), from /proc; 0 where there is none."""
    me = str(pid or os.getpid())
    n = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1].decode() == me:  # field 4, ppid, after the "(comm)" field
            n += 1
    return n


class _Scraped(Collector):
    """Gauges read at scrape time from the live state (no cost between scrapes)."""

    def __init__(self, live: Callable[[], dict[str, tuple[int, int]]], cluster: Callable[[], dict[str, int]]) -> None:
        self.live = live
        self.cluster = cluster

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        sessions = GaugeMetricFamily(_P + "sessions_live", "Sessions live in the daemon", labels=["route"])
        running = GaugeMetricFamily(_P + "turns_running", "Turns running now", labels=["route"])
        for route, (n_sessions, n_turns) in sorted(self.live().items()):
            sessions.add_metric([route], n_sessions)
            running.add_metric([route], n_turns)
        yield sessions
        yield running
        yield GaugeMetricFamily(_P + "child_processes", "Child processes of the daemon (agents)", value=child_processes())
        stats = self.cluster()
        if stats:  # a daemon alone has no leases and forwards nothing
            yield GaugeMetricFamily(_P + "cluster_leases", "Sessions whose lease this instance holds", value=stats.get("leases", 0))
            for key, doc in _CLUSTER_COUNTERS:
                yield CounterMetricFamily(_P + "cluster_" + key, doc, value=stats.get(key, 0))


_CLUSTER_COUNTERS = (
    ("forwarded", "Commands forwarded to the instance owning the session"),
    ("served", "Commands other instances forwarded here"),
    ("forward_failures", "Forwarded commands the owning instance did not answer"),
)


class Metrics:
    """One registry per daemon; implements the session's `TurnObserver`."""

    def __init__(self, live: Callable[[], dict[str, tuple[int, int]]] = dict, *, fronts: Iterable[FrontKind] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions = Counter(_P + "sessions_opened", "Sessions created", ["route"], registry=r)
        self.turns = Counter(_P + "turns", "Turns ended, by stop reason", ["route", "outcome"], registry=r)
        self.turn_seconds = Histogram(
            _P + "turn_duration_seconds", "Turn duration", ["route"], buckets=_TURN_BUCKETS, registry=r
        )
        self.first_event = Histogram(
            _P + "turn_first_event_seconds", "Time from a prompt to the back's first event", ["route"],
            buckets=_FIRST_BUCKETS, registry=r,
        )  # fmt: skip
        self.events = Counter(_P + "events_relayed", "Events delivered to a front, by its protocol", ["protocol"], registry=r)
        self.back_errors = Counter(_P + "back_errors", "Turns failed by their back, by error kind", ["route", "kind"], registry=r)
        self.refused = Counter(_P + "turns_refused", "Turns refused by [limits], by limit and front", ["route", "reason", "front"], registry=r)
        self.connections = Gauge(_P + "open_connections", "Open client connections by front", ["front"], registry=r)
        self.reloads = Counter(_P + "reloads", "Configuration reloads", ["result"], registry=r)
        # Shown at 0 before the first connection: the listener's, and each front's own (FrontKind.connections).
        for label in ["http", *(f.connections for f in fronts if f.connections)]:
            self.connections.labels(label)
        self.live = live  # route → (live sessions, running turns); set by the daemon
        self.cluster: Callable[[], dict[str, int]] = dict  # Cluster.stats; set by the daemon
        r.register(_Scraped(lambda: self.live(), lambda: self.cluster()))
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self._events: dict[str, Any] = {}

    # -- TurnObserver (bridge/session.py) ------------------------------------------------
    def session_opened(self, route: str) -> None:
        self.sessions.labels(route).inc()

    def turn_ended(
        self, route: str, outcome: str, seconds: float, first_event_s: float | None, *, trace: dict[str, str] | None = None
    ) -> None:
        self.turns.labels(route, outcome).inc()
        self.turn_seconds.labels(route).observe(seconds, trace)
        if first_event_s is not None:
            self.first_event.labels(route).observe(first_event_s, trace)

    def back_failed(self, route: str, kind: str) -> None:
        self.back_errors.labels(route, kind).inc()

    def turn_refused(self, route: str, reason: str, front: str) -> None:
        self.refused.labels(route, reason, front).inc()

    def events_delivered(self, protocol: str, count: int) -> None:
        child = self._events.get(protocol)
        if child is None:
            child = self._events[protocol] = self.events.labels(protocol)
        child.inc(count)

    # -- the daemon ------------------------------------------------------------------------
    def connection_opened(self, front: str) -> None:
        self.connections.labels(front).inc()

    def connection_closed(self, front: str) -> None:
        self.connections.labels(front).dec()

    def reloaded(self, ok: bool) -> None:
        self.reloads.labels("ok" if ok else "failed").inc()

    def render(self, *, openmetrics_format: bool = False) -> bytes:
        """The page; in OpenMetrics (with exemplars) when asked (`wants_openmetrics`)."""
        if openmetrics_format:
            return openmetrics.generate_latest(self.registry)
        return generate_latest(self.registry)


def wants_openmetrics(accept: str) -> bool:
    """Whether an `Accept` header asks for OpenMetrics (OpenMetrics 1.0, "Content Negotiation")."""
    return "application/openmetrics-text" in accept.lower()
