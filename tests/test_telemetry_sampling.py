"""Tracing under a sampler (bridge/telemetry/otel.py): a turn the sampler drops records
nothing, opens no child span, and still hands its back the client's trace, unsampled;
a turn it keeps is traced whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from bridge import telemetry
from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore
from bridge.telemetry.otel import OtelTracing

CEILING_S = 20
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The SDK's default sampler (parent-based), and a ratio of 0 for a turn with no parent."""
    memory = InMemorySpanExporter()
    sampler = ParentBased(root=TraceIdRatioBased(0.0))
    telemetry.install(OtelTracing.with_processor(SimpleSpanProcessor(memory), flush_span_min_ms=0.0, sampler=sampler))
    try:
        yield memory
    finally:
        telemetry.uninstall()


def _config() -> Any:
    return parse_config({"routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0}}}, "store": {"flush_interval_s": 0.01}})


async def _turn_with_a_question(carrier: dict[str, str] | None) -> tuple[ev.TurnEnded, dict[str, str], dict[str, str]]:
    """A turn that asks a question (answered) and flushes; returns its end, the carrier a
    back would send, and its log ids."""
    manager = SessionManager(_config(), MemoryStore(), make_back)
    asked = trio.Event()
    questions: list[ev.QuestionAsked] = []

    class Heard:
        def deliver(self, event: ev.Event) -> None:
            if isinstance(event, ev.QuestionAsked):
                questions.append(event)
                asked.set()

        def congested(self) -> bool:
            return False

        async def wait_uncongested(self) -> None:
            pass

    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        session = await manager.create("demo", cwd="/w")
        session.subscribe(Heard())
        telemetry.incoming("a2a", carrier)
        turn = session.start_turn([TextContent(text="ask: may I?")])
        sent, ids = turn.trace.carrier(), turn.trace.log_ids()
        await asked.wait()
        question = questions[0].question
        session.answer(question.id, selected=[question.options[0].id])
        ended = await turn.wait()
        nursery.cancel_scope.cancel()
    return ended, sent, ids


def _sampled(carrier: dict[str, str]) -> bool:
    return bool(int(carrier["traceparent"][53:55], 16) & 1)  # W3C Trace Context §3.2.2.5.1


async def test_a_dropped_turn_records_nothing_and_passes_the_decision_on(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        ended, sent, ids = await _turn_with_a_question({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"})
    assert ended.stop_reason is ev.StopReason.END_TURN
    assert exporter.get_finished_spans() == ()  # no turn, back, question or flush span
    version, trace_id, span_id, flags = sent["traceparent"].split("-")
    assert (version, trace_id) == ("00", TRACE_ID) and span_id not in (PARENT_ID, "0" * 16)
    assert not _sampled(sent)
    assert ids == {}  # an unsampled trace is not named on log lines


async def test_a_turn_without_a_parent_is_dropped_by_the_root_sampler(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        _ended, sent, _ids = await _turn_with_a_question(None)
    assert exporter.get_finished_spans() == ()
    assert not _sampled(sent)


async def test_a_sampled_parent_keeps_the_whole_turn(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        _ended, sent, ids = await _turn_with_a_question({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert {"turn demo", "back demo", "question.wait"} <= set(names) and "store.flush" in names
    assert sent["traceparent"].startswith(f"00-{TRACE_ID}-") and _sampled(sent)
    assert ids["trace_id"] == TRACE_ID
