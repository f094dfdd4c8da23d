"""Tracing (bridge/telemetry): the spans of a turn on the SDK's in-memory exporter, the
reading of untrusted carriers, log correlation, exemplars, and that tracing off imports
no OpenTelemetry module at all."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, TraceState

from acp_back_support import PEERS, PY_AGENT

from bridge import telemetry
from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.logs import JsonFormatter
from bridge.metrics import Metrics, wants_openmetrics
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore
from bridge.telemetry.otel import OtelTracing

CEILING_S = 20
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    telemetry.install(OtelTracing.with_processor(SimpleSpanProcessor(memory)))
    try:
        yield memory
    finally:
        telemetry.uninstall()


def _config() -> Any:
    return parse_config(
        {
            "routes": {
                "demo": {
                    "back": {"kind": "demo", "chunk_delay_s": 0},
                    "prompts": {"greet": {"description": "a greeting", "messages": [{"text": "say hello to {who}"}],
                                          "arguments": [{"name": "who"}]}},
                },
            },
            "store": {"flush_interval_s": 0.01},
        }
    )  # fmt: skip


class _Heard:
    """A subscriber keeping every event, with a wake-up for the first question."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.asked = trio.Event()

    def deliver(self, event: ev.Event) -> None:
        self.events.append(event)
        if isinstance(event, ev.QuestionAsked):
            self.asked.set()

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


async def _run(text: str, *, answer: bool = False, carrier: dict[str, str] | None = None, front: str = "acp") -> ev.TurnEnded:
    manager = SessionManager(_config(), MemoryStore(), make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        session = await manager.create("demo", cwd="/w")
        heard = _Heard()
        session.subscribe(heard)
        telemetry.incoming(front, carrier)
        turn = session.start_turn([TextContent(text=text)])
        if answer:
            await heard.asked.wait()
            question = next(e for e in heard.events if isinstance(e, ev.QuestionAsked)).question
            session.answer(question.id, selected=[question.options[0].id])
        ended = await turn.wait()
        nursery.cancel_scope.cancel()
    return ended


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_a_turn_is_one_span_with_its_back_question_and_flushes_as_children(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        ended = await _run("ask: may I?", answer=True, carrier={"traceparent": TRACEPARENT, "tracestate": "k=v"})
    assert ended.stop_reason is ev.StopReason.END_TURN
    spans = exporter.get_finished_spans()
    (turn,) = _by_name(spans, "turn demo")
    assert turn.kind is SpanKind.SERVER
    attrs = dict(turn.attributes or {})
    assert attrs["agent_bridge.route"] == "demo" and attrs["agent_bridge.front"] == "acp"
    assert attrs["agent_bridge.back"] == "demo" and attrs["agent_bridge.stop_reason"] == "end_turn"
    assert attrs["agent_bridge.turn"] == ended.turn_id and attrs["agent_bridge.session"]
    # The client's context is the turn's parent: same trace, its span as the parent.
    assert format(turn.context.trace_id, "032x") == TRACE_ID
    assert turn.parent is not None and format(turn.parent.span_id, "016x") == PARENT_ID
    assert turn.context.trace_state.get("k") == "v"
    assert turn.status.status_code is StatusCode.UNSET
    assert [e.name for e in turn.events] == ["first_chunk"]
    (back,) = _by_name(spans, "back demo")
    (question,) = _by_name(spans, "question.wait")
    flushes = _by_name(spans, "store.flush")
    assert back.kind is SpanKind.CLIENT and flushes
    for child in (back, question, *flushes):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
    q = dict(question.attributes or {})
    assert q["agent_bridge.answered_by"] == "user" and q["agent_bridge.cancelled"] is False
    assert isinstance(q["agent_bridge.waited_s"], float) and q["agent_bridge.question_kind"] == "permission"
    # The last flush (the turn's end) is inside the turn span.
    assert max(f.end_time or 0 for f in flushes) <= (turn.end_time or 0)


async def test_fast_store_flushes_add_up_on_the_turn_not_as_spans_of_their_own() -> None:
    memory = InMemorySpanExporter()
    telemetry.install(OtelTracing.with_processor(SimpleSpanProcessor(memory), flush_span_min_ms=60_000))
    try:
        with trio.fail_after(CEILING_S):
            await _run("hello")
    finally:
        telemetry.uninstall()
    spans = memory.get_finished_spans()
    assert not _by_name(spans, "store.flush")
    (turn,) = _by_name(spans, "turn demo")
    attrs = dict(turn.attributes or {})
    assert attrs["agent_bridge.store_flush_s"] > 0


async def test_a_failed_turn_has_error_status_and_its_error(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        ended = await _run("fail: now")
    assert ended.stop_reason is ev.StopReason.FAILED
    spans = exporter.get_finished_spans()
    (turn,) = _by_name(spans, "turn demo")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.status.description and "failed on purpose" in turn.status.description
    attrs = dict(turn.attributes or {})
    assert attrs["error.type"] == "BackError" and attrs["agent_bridge.stop_reason"] == "failed"
    (back,) = _by_name(spans, "back demo")
    assert back.status.status_code is StatusCode.ERROR
    assert turn.parent is None  # no carrier: a trace of its own


def test_a_span_shows_no_secret_a_log_line_would_not(exporter: InMemorySpanExporter) -> None:
    trace = telemetry.start_turn(route="r", session="s", turn="t", back=None)
    with pytest.raises(RuntimeError), trace.child("prompt.expand"):
        raise RuntimeError("GET https://agent/x failed, Authorization: Bearer sk-live-0123456789")
    trace.end("failed", "BackError", "the agent said token=hunter2hunter2 is wrong")
    for span in exporter.get_finished_spans():
        assert span.status.status_code is StatusCode.ERROR
        assert "0123456789" not in (span.status.description or "") and "hunter2" not in (span.status.description or "")
        assert "***" in (span.status.description or "")


def test_the_sdks_span_limits_and_sampler_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans are recorded by bridge/telemetry/otel.py, not by the SDK's live `Span`: what
    the SDK would have applied still is. `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT` and
    `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT` bound attributes, a sampler's own attributes and trace
    state are the span's, and a RECORD_ONLY decision records a span that no exporting
    processor passes on (it is not sampled) and names no trace on log lines."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    class Tagging(Sampler):
        def __init__(self, decision: Decision) -> None:
            self.decision = decision

        def should_sample(self, parent_context: Context | None, trace_id: int, name: str, *args: Any, **kw: Any) -> SamplingResult:
            attributes = dict(args[1] if len(args) > 1 else kw.get("attributes") or {})
            return SamplingResult(self.decision, {**attributes, "sampler.said": "yes"}, TraceState([("s", "1")]))

        def get_description(self) -> str:
            return "Tagging"

    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "6")
    memory = InMemorySpanExporter()
    tracing = OtelTracing.with_processor(SimpleSpanProcessor(memory), sampler=Tagging(Decision.RECORD_AND_SAMPLE))
    attributes = {"agent_bridge.route": "demo", "agent_bridge.session": "session-1", "agent_bridge.turn": "turn-1", "agent_bridge.back": "demo"}
    trace = tracing.start_turn(None, "a2a", attributes)
    with trace.back():
        assert trace.carrier()["tracestate"] == "s=1"
    trace.end("end_turn")
    back, turn = memory.get_finished_spans()
    attrs = dict(turn.attributes or {})
    assert attrs["agent_bridge.turn"] == "turn" and attrs["sampler.said"] == "yes"  # "turn-1", cut to 4
    # Eight attributes (4 + front, the sampler's, stop_reason, store_flush_s), six kept: the oldest go, as in the SDK.
    assert len(attrs) == 6 and turn.dropped_attributes == 2 and "agent_bridge.route" not in attrs
    assert turn.context.trace_state.get("s") == "1" and back.context.trace_state.get("s") == "1"
    assert back.parent is not None and back.parent.span_id == turn.context.span_id

    memory.clear()
    recording = OtelTracing.with_processor(SimpleSpanProcessor(memory), sampler=Tagging(Decision.RECORD_ONLY))
    trace = recording.start_turn(None, "a2a", attributes)
    with trace.back():
        assert trace.carrier()["traceparent"].endswith("-00")  # recorded, not sampled: the next hop is told so
    trace.end("end_turn")
    assert memory.get_finished_spans() == () and trace.log_ids() == {}


def test_a_recorded_span_is_what_the_sdk_would_have_made_of_it() -> None:
    """The corners where recording differs from the SDK's live spans, held to the SDK:
    a root turn is sampled on an empty context, not on a span another instrumentation
    left current; span limits given to the provider count (events: the newest kept, the
    rest counted); a sampler that returns no attributes leaves the span none of the
    turn's; what is noted after the end does not reach the exported span."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, Sampler, SamplingResult

    attributes = {"agent_bridge.route": "demo", "agent_bridge.session": "s", "agent_bridge.turn": "t", "agent_bridge.back": "demo"}
    memory = InMemorySpanExporter()
    tracing = OtelTracing.with_processor(SimpleSpanProcessor(memory), sampler=ParentBased(ALWAYS_ON), span_limits=SpanLimits(max_events=2))
    ambient = otel_trace.NonRecordingSpan(otel_trace.SpanContext(7, 8, False, otel_trace.TraceFlags(0), TraceState([("amb", "1")])))
    token = otel_context.attach(otel_trace.set_span_in_context(ambient))
    try:
        trace = tracing.start_turn(None, "a2a", attributes)
    finally:
        otel_context.detach(token)
    assert trace.carrier()["traceparent"].endswith("-01") and "tracestate" not in trace.carrier()
    for name in ("one", "two", "three"):
        trace.event(name)
    trace.end("end_turn")
    trace.note(late="after the end")
    (turn,) = memory.get_finished_spans()
    assert [e.name for e in turn.events] == ["two", "three"] and turn.dropped_events == 1
    assert "agent_bridge.late" not in dict(turn.attributes or {}) and turn.parent is None

    class Bare(Sampler):
        def should_sample(self, *args: Any, **kw: Any) -> SamplingResult:
            return SamplingResult(Decision.RECORD_AND_SAMPLE)

        def get_description(self) -> str:
            return "Bare"

    memory.clear()
    bare = OtelTracing.with_processor(SimpleSpanProcessor(memory), sampler=Bare())
    bare_trace = bare.start_turn(None, "a2a", attributes)
    with bare_trace.back():
        pass
    bare_trace.end("end_turn")
    back, turn = memory.get_finished_spans()
    assert back.name == "back demo" and set(dict(turn.attributes or {})) == {"agent_bridge.stop_reason", "agent_bridge.store_flush_s"}


def test_the_console_exporter_prints_a_recorded_span() -> None:
    """`OTEL_TRACES_EXPORTER=console`: the SDK's ConsoleSpanExporter renders the spans
    recorded here (their JSON form reads every field the SDK's own spans have)."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    out = io.StringIO()
    tracing = OtelTracing.with_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")))
    trace = tracing.start_turn({"traceparent": TRACEPARENT}, "acp", {"agent_bridge.route": "demo", "agent_bridge.session": "s", "agent_bridge.turn": "t", "agent_bridge.back": "demo"})
    trace.event("first_chunk")
    trace.end("failed", "BackError", "it broke")
    (line,) = out.getvalue().splitlines()
    span = json.loads(line)
    assert span["name"] == "turn demo" and span["kind"] == "SpanKind.SERVER" and span["parent_id"] == f"0x{PARENT_ID}"
    assert span["status"] == {"status_code": "ERROR", "description": "it broke"}
    assert [e["name"] for e in span["events"]] == ["first_chunk"] and span["attributes"]["agent_bridge.front"] == "acp"


async def test_a_prompt_expansion_is_a_child_span(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        await _run("/greet who=you")
    spans = exporter.get_finished_spans()
    (turn,) = _by_name(spans, "turn demo")
    (expand,) = _by_name(spans, "prompt.expand")
    assert expand.parent is not None and expand.parent.span_id == turn.context.span_id
    assert dict(expand.attributes or {})["agent_bridge.prompt"] == "greet"


async def test_the_acp_back_sends_its_call_as_the_agents_parent_in_meta(exporter: InMemorySpanExporter, tmp_path: Any) -> None:
    """The ACP back puts `_meta.traceparent` on `session/prompt` (ACP extensibility, `_meta`):
    the agent (the official ACP SDK, its own process) reports what it received."""
    config = parse_config({"routes": {"agent": {"back": {"kind": "acp", "command": PY_AGENT}}}, "store": {"flush_interval_s": 0.01}})
    manager = SessionManager(config, MemoryStore(), make_back)
    heard = _Heard()
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("agent", cwd=str(tmp_path))
            session.subscribe(heard)
            telemetry.incoming("acp", {"traceparent": TRACEPARENT})
            ended = await session.start_turn([TextContent(text="traceparent")]).wait()
            await session.close()
            nursery.cancel_scope.cancel()
    assert ended.stop_reason is ev.StopReason.END_TURN, ended
    (back,) = _by_name(exporter.get_finished_spans(), "back acp")
    said = "".join(e.content.text for e in heard.events if isinstance(e, ev.MessageChunk) and isinstance(e.content, TextContent))
    assert f"traceparent=00-{TRACE_ID}-{format(back.context.span_id, '016x')}-01" in said


async def test_an_mcp_prompt_source_is_sent_the_turn_in_meta(exporter: InMemorySpanExporter, tmp_path: Any) -> None:
    """`prompts/get` carries `_meta.traceparent` (MCP SEP-414) to the source (the official
    `mcp` SDK's server, its own process), which puts what it got in the prompt."""
    control = tmp_path / "prompts.json"
    control.write_text(json.dumps({"prompts": [{"name": "traced", "text": "parent={_meta.traceparent}"}]}))
    config = parse_config({
        "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0}}},
        "prompt_sources": [{"name": "src", "command": [sys.executable, str(PEERS / "mcp_prompts_server.py"), str(control)]}],
        "store": {"flush_interval_s": 0.01},
    })  # fmt: skip
    manager = SessionManager(config, MemoryStore(), make_back)
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo", cwd="/w")
            turn = session.start_turn([TextContent(text="/traced")])
            ended = await turn.wait()
            nursery.cancel_scope.cancel()
    assert ended.stop_reason is ev.StopReason.END_TURN, ended
    spans = exporter.get_finished_spans()
    (span,) = _by_name(spans, "turn demo")
    sent = f"00-{format(span.context.trace_id, '032x')}-{format(span.context.span_id, '016x')}-"
    (block,) = turn.prompt
    assert isinstance(block, TextContent) and block.text.startswith(f"parent={sent}")  # then the flags: sampled


async def test_an_untrusted_client_cannot_choose_the_trace(exporter: InMemorySpanExporter) -> None:
    telemetry.install(telemetry._tracing, trust_incoming=False)  # type: ignore[arg-type]
    with trio.fail_after(CEILING_S):
        await _run("hello", carrier={"traceparent": TRACEPARENT})
    (turn,) = _by_name(exporter.get_finished_spans(), "turn demo")
    assert turn.parent is None and format(turn.context.trace_id, "032x") != TRACE_ID


async def test_the_incoming_context_is_used_by_one_turn_only(exporter: InMemorySpanExporter) -> None:
    with trio.fail_after(CEILING_S):
        manager = SessionManager(_config(), MemoryStore(), make_back)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo", cwd="/w")
            telemetry.incoming("a2a", {"traceparent": TRACEPARENT})
            await session.start_turn([TextContent(text="one")]).wait()
            await session.start_turn([TextContent(text="two")]).wait()
            nursery.cancel_scope.cancel()
    first, second = sorted(_by_name(exporter.get_finished_spans(), "turn demo"), key=lambda s: s.start_time or 0)
    assert first.parent is not None and second.parent is None
    assert dict(second.attributes or {})["agent_bridge.front"] == "internal"


async def test_log_lines_of_a_turn_carry_its_trace_and_span_ids(exporter: InMemorySpanExporter) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("bridge.session")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        with trio.fail_after(CEILING_S):
            await _run("hello", carrier={"traceparent": TRACEPARENT})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    started = next(line for line in lines if line["msg"] == "turn started")
    (turn,) = _by_name(exporter.get_finished_spans(), "turn demo")
    assert started["trace_id"] == TRACE_ID
    assert started["span_id"] == format(turn.context.span_id, "016x")


async def test_the_turn_histograms_carry_the_trace_as_an_exemplar_in_openmetrics(exporter: InMemorySpanExporter) -> None:
    metrics = Metrics()
    manager = SessionManager(_config(), MemoryStore(), make_back)
    manager.observer = metrics
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo", cwd="/w")
            telemetry.incoming("a2a", {"traceparent": TRACEPARENT})
            await session.start_turn([TextContent(text="hello")]).wait()
            nursery.cancel_scope.cancel()
    om = metrics.render(openmetrics_format=True).decode()
    assert '# {span_id="' in om and f'trace_id="{TRACE_ID}"' in om
    assert "agent_bridge_turn_duration_seconds_bucket" in om and om.rstrip().endswith("# EOF")
    assert "trace_id" not in metrics.render().decode()  # the classic text format has no exemplars
    assert wants_openmetrics("application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert not wants_openmetrics("text/plain")


async def test_a_tracer_that_fails_leaves_the_turn_untraced_not_failed() -> None:
    class Broken:
        def start_turn(self, parent: Any, front: str, attributes: Any) -> Any:
            raise RuntimeError("exporter misconfigured")

        def shutdown(self) -> None:
            pass

    telemetry.install(Broken())
    try:
        with trio.fail_after(CEILING_S):
            ended = await _run("hello")
    finally:
        telemetry.uninstall()
    assert ended.stop_reason is ev.StopReason.END_TURN


def test_off_the_trace_calls_are_no_ops() -> None:
    assert not telemetry.enabled()
    telemetry.incoming("a2a", {"traceparent": TRACEPARENT})
    trace = telemetry.start_turn(route="r", session="s", turn="t", back=None)
    assert trace is telemetry.OFF and trace.carrier() == {} and trace.log_ids() == {}
    with trace.child("x") as span, trace.back(), trace.flush(3):
        span.set(a=1)
    assert telemetry.exemplar(trace) is None


_OFF_PROBE = """
import json, os, sys
from bridge.cli import main
try:
    main(["ask", "demo", "tool: hello", "--config", sys.argv[1], "--state-dir", sys.argv[2]])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def test_tracing_off_imports_no_opentelemetry_module(tmp_path: Any) -> None:
    """A whole turn through the real CLI (`agent-bridge ask`) with `[telemetry]` absent,
    in a fresh interpreter: not one `opentelemetry` module is loaded."""
    (config := tmp_path / "c.toml").write_text('[routes.demo.back]\nkind = "demo"\nchunk_delay_s = 0\n')
    proc = subprocess.run(
        [sys.executable, "-c", _OFF_PROBE, str(config), str(tmp_path / "state")], capture_output=True, text=True, timeout=60
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "otel": []}, proc.stderr


def test_enabled_without_the_extra_is_a_config_error(tmp_path: Any) -> None:
    """`[telemetry] enabled` where the SDK cannot be imported: exit 78 with what to install."""
    (config := tmp_path / "c.toml").write_text('[telemetry]\nenabled = true\n[routes.demo.back]\nkind = "demo"\n')
    probe = "import sys; sys.modules['opentelemetry'] = None\nfrom bridge.cli import main\nmain(['ask', 'demo', 'hi', '--config', sys.argv[1], '--state-dir', sys.argv[2]])"
    proc = subprocess.run([sys.executable, "-c", probe, str(config), str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78
    assert "agent-bridge[otel]" in proc.stderr


# -- carriers are untrusted input -------------------------------------------------------------


def test_carrier_from_keeps_only_a_valid_traceparent() -> None:
    assert telemetry.carrier_from({"traceparent": TRACEPARENT, "tracestate": "a=1"}) == {"traceparent": TRACEPARENT, "tracestate": "a=1"}
    assert telemetry.carrier_from({"traceparent": TRACEPARENT + "-future"}) is None  # version 00 has no more fields
    assert telemetry.carrier_from({"traceparent": "01-" + TRACEPARENT[3:] + "-x"}) == {"traceparent": "01-" + TRACEPARENT[3:]}
    for bad in ("", "00-" + "0" * 32 + "-" + PARENT_ID + "-01", f"ff-{TRACE_ID}-{PARENT_ID}-01", TRACEPARENT.upper(), 5, None):
        assert telemetry.carrier_from({"traceparent": bad}) is None
    assert telemetry.carrier_from({"traceparent": TRACEPARENT, "tracestate": "x" * 513}) == {"traceparent": TRACEPARENT}
    assert telemetry.carrier_from({"traceparent": TRACEPARENT, "tracestate": "a=1, b@sys=x y,"}) == {"traceparent": TRACEPARENT, "tracestate": "a=1, b@sys=x y,"}
    for bad in ("A=1", "a=1,a=2", "a=", "=1", "a=1\n", ",".join(f"k{i}=v" for i in range(33))):
        assert telemetry.carrier_from({"traceparent": TRACEPARENT, "tracestate": bad}) == {"traceparent": TRACEPARENT}, bad
    assert telemetry.carrier_from(None) is None


_HEX = "0123456789abcdef"


@given(
    st.one_of(
        st.dictionaries(st.sampled_from(["traceparent", "tracestate", "baggage", "x"]), st.one_of(st.text(), st.integers(), st.none())),
        st.builds(
            lambda v, t, s, f, rest, state: {"traceparent": f"{v}-{t}-{s}-{f}{rest}", "tracestate": state},
            st.text(_HEX, min_size=2, max_size=2), st.text(_HEX, min_size=32, max_size=32), st.text(_HEX, min_size=16, max_size=16),
            st.text(_HEX, min_size=2, max_size=2), st.one_of(st.just(""), st.text(max_size=300)),
            st.one_of(st.text(max_size=600), st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}=[a-zA-Z0-9 ]{0,5}[a-z]", fullmatch=True), max_size=40).map(",".join)),
        ),
    )
)  # fmt: skip
def test_carrier_from_is_total_and_bounded(source: dict[str, Any]) -> None:
    out = telemetry.carrier_from(source)
    if out is None:
        return
    assert set(out) <= {"traceparent", "tracestate"}
    parent = out["traceparent"]
    assert len(parent) == 55 and parent[:2] != "ff" and parent.split("-")[1] != "0" * 32
    assert len(out.get("tracestate", "")) <= 512
    if "tracestate" in out:  # one the SDK takes whole, with no warning to log
        members = [m.strip() for m in out["tracestate"].split(",") if m.strip()]
        assert len(TraceState.from_header([out["tracestate"]])) == len(members)
