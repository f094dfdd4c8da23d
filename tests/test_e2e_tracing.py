"""Tracing end to end: two real `agent-bridge serve` processes in a chain, an a2a-sdk agent
behind the second, and every span exported over OTLP/HTTP to a receiver in this test
(an HTTP server on 127.0.0.1 decoding `ExportTraceServiceRequest` with the official
`opentelemetry-proto` package).

    ACP client ──_meta.traceparent──▶ bridge A ──A2A (headers)──▶ bridge B ──A2A──▶ a2a-sdk agent
    A2A client ──traceparent header─▶ bridge A ──chat:send──────▶ bridge B ──A2A──▶ a2a-sdk agent

Each path is one trace: the client's span is bridge A's turn's parent, A's back call is
B's turn's parent, B's back call is the parent the agent was sent (it logs the headers it
received). Then each other way in (MCP `_meta`, the /ws upgrade headers, a chat:send's
fields) makes a turn whose parent is what its client sent.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from trio_websocket import open_websocket_url

from daemon_support import Daemon, base_config, demo_route, serve_peer, start_daemon

AGENT = Path(__file__).resolve().parent / "peers" / "a2a_agent.py"
MAX_EXPORT_BYTES = 8 * 1024 * 1024


class Span(dict[str, Any]):
    """One exported span: service, name, kind, trace, span, parent, attributes, status."""


class OtlpReceiver:
    """`POST /v1/traces` (OTLP/HTTP, protobuf), kept as `Span`s; a thread serves it."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length") or 0)
                if self.path != "/v1/traces" or not 0 < length <= MAX_EXPORT_BYTES:
                    self.send_error(400)
                    return
                request = ExportTraceServiceRequest.FromString(self.rfile.read(length))
                receiver._keep(request)
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        got = []
        for rs in request.resource_spans:
            service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value") for a in s.attributes}
                    got.append(Span(
                        service=service, name=s.name, kind=s.kind, trace=s.trace_id.hex(), span=s.span_id.hex(),
                        parent=s.parent_span_id.hex(), attributes=attrs, status=s.status.code, events=[e.name for e in s.events],
                    ))  # fmt: skip
        with self.cond:
            self.spans += got
            self.cond.notify_all()

    async def wait_for(self, pred: Callable[[list[Span]], Any], timeout: float = 30) -> Any:
        """What `pred` returns once it is truthy on the spans received (woken by each export)."""

        def wait() -> Any:
            with self.cond:
                found = self.cond.wait_for(lambda: pred(self.spans), timeout)
                return found or AssertionError(f"no such spans within {timeout} s; got {[(s['service'], s['name']) for s in self.spans]}")

        result = await trio.to_thread.run_sync(wait, abandon_on_cancel=True)
        if isinstance(result, AssertionError):
            raise result
        return result

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ids() -> tuple[str, str, str]:
    trace, parent = os.urandom(16).hex(), os.urandom(8).hex()
    return trace, parent, f"00-{trace}-{parent}-01"


def _one(spans: list[Span], **match: Any) -> Span | None:
    found = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    return found[0] if len(found) == 1 else None


def _chain(trace: str, front_route: str, back_kind: str) -> Callable[[list[Span]], Any]:
    """The four spans of one path through both bridges, once all are exported."""

    def find(spans: list[Span]) -> Any:
        ours = [s for s in spans if s["trace"] == trace]
        parts = (
            _one(ours, service="bridge-a", name=f"turn {front_route}"),
            _one(ours, service="bridge-a", name=f"back {back_kind}"),
            _one(ours, service="bridge-b", name="turn agent"),
            _one(ours, service="bridge-b", name="back a2a"),
        )
        return parts if all(parts) else None

    return find


def _otel_env(env: dict[str, str], receiver: OtlpReceiver, service: str) -> dict[str, str]:
    return {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: export soon, the test waits for it
    }


async def _peer_traceparents(agent_url: str) -> list[str]:
    async with httpx.AsyncClient(trust_env=False) as c:
        log = (await c.get(f"{agent_url}/_test/log")).json()
    return [r["headers"]["traceparent"] for r in log if r["method"] == "POST" and "traceparent" in r["headers"]]


async def _acp_prompt(a: Daemon, route: str, text: str, traceparent: str) -> dict[str, Any]:
    async with a.acp(route) as c:
        await c.init()
        sid = await c.new()
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}], "_meta": {"traceparent": traceparent}}
        return await c.response(await c.start("session/prompt", prompt), timeout=30)


async def _a2a_send(d: Daemon, route: str, text: str, traceparent: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": os.urandom(4).hex(), "role": "ROLE_USER", "parts": [{"text": text}]}}}  # fmt: skip
    async with httpx.AsyncClient(base_url=d.url, timeout=30, trust_env=False) as h:
        r = await h.post(f"/a2a/{route}", json=body, headers={"A2A-Version": "1.0", "traceparent": traceparent})
    assert r.status_code == 200, r.text
    return r.json()["result"]["task"]  # type: ignore[no-any-return]


async def _ws_turn(d: Daemon, route: str, text: str, *, header: str | None = None, field: str | None = None) -> None:
    async with httpx.AsyncClient(base_url=d.url, timeout=30, trust_env=False) as h:
        sid = (await h.post("/api/sessions", json={"route": route})).json()["session_id"]
    headers = [("traceparent", header)] if header else []
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", extra_headers=headers) as ws:
        data = {"session_id": sid, "message": text, **({"traceparent": field} if field else {})}
        await ws.send_message(json.dumps({"event": "chat:send", "data": data}))
        while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
            assert frame["event"] != "system:error", frame
        assert frame["data"]["status"] == "completed", frame


async def test_one_trace_across_two_bridges_and_an_a2a_agent(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    with OtlpReceiver() as receiver, trio.fail_after(120):
        async with serve_peer([sys.executable, str(AGENT)], tmp_path / "agent.log") as port:
            agent_url = f"http://127.0.0.1:{port}"
            config_b = base_config(tmp_path / "b", {"agent": {"back": {"kind": "a2a", "url": agent_url}}, "demo": demo_route()},
                                   telemetry={"enabled": True})  # fmt: skip
            async with start_daemon(bridge_exe, tmp_path, _otel_env(clean_env, receiver, "bridge-b"), config_b, name="b") as b:
                config_a = base_config(tmp_path / "a", {
                    "relay": {"back": {"kind": "a2a", "url": f"{b.url}/a2a/agent"}},
                    "relay_ws": {"back": {"kind": "chat", "url": b.url.replace("http://", "ws://") + "/ws",
                                          "session_params": {"route": "agent"}}},
                }, telemetry={"enabled": True})  # fmt: skip
                async with start_daemon(bridge_exe, tmp_path, _otel_env(clean_env, receiver, "bridge-a"), config_a, name="a") as a:
                    try:
                        await _chains(a, b, receiver, agent_url)
                        await _every_way_in(b, receiver)
                    except BaseException as exc:
                        exc.add_note(f"--- bridge A log:\n{a.log_text()[-3000:]}\n--- bridge B log:\n{b.log_text()[-3000:]}")
                        raise


async def _chains(a: Daemon, b: Daemon, receiver: OtlpReceiver, agent_url: str) -> None:
    # 1. An editor's ACP prompt with `_meta.traceparent` → A (A2A back) → B (A2A back) → the agent.
    trace, parent, tp = _ids()
    reply = await _acp_prompt(a, "relay", "hello through two bridges", tp)
    assert reply.get("result") == {"stopReason": "end_turn"}, reply
    turn_a, back_a, turn_b, back_b = await receiver.wait_for(_chain(trace, "relay", "a2a"))
    assert turn_a["parent"] == parent and turn_a["attributes"]["agent_bridge.front"] == "acp"
    assert back_a["parent"] == turn_a["span"]
    assert turn_b["parent"] == back_a["span"] and turn_b["attributes"]["agent_bridge.front"] == "a2a"
    assert back_b["parent"] == turn_b["span"] and back_b["attributes"]["agent_bridge.remote_task"]
    assert "first_chunk" in turn_a["events"] and turn_a["attributes"]["agent_bridge.stop_reason"] == "end_turn"
    # The agent was sent B's back call as the parent (a2a-sdk's server read the header).
    assert f"00-{trace}-{back_b['span']}-01" in await _peer_traceparents(agent_url)  # sampled, as the editor said

    # 2. An A2A client's traceparent header → A (chat back: chat:send's fields) → B's /ws → the agent.
    trace, parent, tp = _ids()
    task = await _a2a_send(a, "relay_ws", "hello over the chat stream", tp)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    turn_a, back_a, turn_b, back_b = await receiver.wait_for(_chain(trace, "relay_ws", "chat"))
    assert turn_a["parent"] == parent and turn_a["attributes"]["agent_bridge.front"] == "a2a"
    assert back_a["parent"] == turn_a["span"]
    assert turn_b["parent"] == back_a["span"] and turn_b["attributes"]["agent_bridge.front"] == "chat"
    assert back_b["parent"] == turn_b["span"]
    assert f"00-{trace}-{back_b['span']}-01" in await _peer_traceparents(agent_url)

    # The turn histograms link to traces in OpenMetrics (exemplars), when the scraper asks for it.
    async with httpx.AsyncClient(base_url=a.url, timeout=30, trust_env=False) as h:
        page = await h.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert page.headers["content-type"].startswith("application/openmetrics-text")
    assert f'trace_id="{trace}"' in page.text


async def _every_way_in(b: Daemon, receiver: OtlpReceiver) -> None:
    """Each front honours what its client sends: the turn's parent is the client's span."""
    from mcp import Client

    cases: list[tuple[str, str, str]] = []
    trace, parent, tp = _ids()
    async with Client(b.url + "/mcp", mode="legacy", cache=None) as client:
        result = await client.call_tool("demo", {"prompt": "mcp hello"}, meta={"traceparent": tp})  # type: ignore[typeddict-unknown-key]
    assert not result.is_error, result
    cases.append((trace, parent, "mcp"))
    trace, parent, tp = _ids()
    await _ws_turn(b, "demo", "ws upgrade", header=tp)  # the upgrade request's header
    cases.append((trace, parent, "chat"))
    trace, parent, tp = _ids()
    _, _, other = _ids()
    await _ws_turn(b, "demo", "ws field", header=other, field=tp)  # the chat:send's own field wins
    cases.append((trace, parent, "chat"))
    for trace, parent, front in cases:
        turn = await receiver.wait_for(lambda spans, t=trace: _one(spans, trace=t, name="turn demo"))
        assert turn["parent"] == parent and turn["attributes"]["agent_bridge.front"] == front, turn
