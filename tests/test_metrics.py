"""Health, readiness, Prometheus metrics and logs of the real daemon (bridge/health.py,
bridge/metrics.py, bridge/logs.py), and the log formatter on its own."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import trio
from prometheus_client.parser import text_string_to_metric_families

from bridge import logs
from daemon_support import base_config, demo_route, start_daemon, toml

HAS_WS = (Path(__file__).resolve().parent.parent / "bridge" / "fronts" / "ws.py").exists()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_health_readiness_and_metrics(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    child = tmp_path / "child.toml"
    child.write_text(toml({"routes": {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0)}}))
    coder = {"back": {"kind": "acp", "command": [*bridge_exe, "acp", "demo", "--config", str(child), "--state-dir", str(tmp_path / "cs")]}}
    unreachable = {"back": {"kind": "a2a", "url": "http://127.0.0.1:9/agent", "connect_timeout_s": 1}}
    routes = {"demo": demo_route(), "coder": coder, "far": unreachable}
    # /readyz details need the admin token (tests/test_http_policy.py: without it, only the status).
    config = base_config(tmp_path, routes, daemon={"probe_interval_s": 0, "probe_timeout_s": 3}, server={"admin_token_env": "ADMIN_T"})
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"ADMIN_T": "adm"}) as d:
            status, body = await d.get("/healthz")
            assert status == 200 and json.loads(body) == {"status": "ok"}
            import httpx

            async with httpx.AsyncClient(timeout=10) as h:
                r = await h.get(d.url + "/readyz", headers={"authorization": "Bearer adm"})
            status, ready = r.status_code, r.json()
            # A back that cannot be reached is reported, and the daemon is still ready.
            assert status == 200 and ready["listeners"] and ready["store"] and ready["accepting"], ready
            assert ready["routes"]["demo"]["status"] == "ok"
            assert ready["routes"]["coder"]["status"] == "ok" and "found" in ready["routes"]["coder"]["detail"]
            assert ready["routes"]["far"]["status"] == "FAILED" and "127.0.0.1:9" in ready["routes"]["far"]["detail"], ready

            async with d.acp("demo") as c:
                await c.init()
                sid = await c.new()
                assert (await c.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}))["stopReason"] == "end_turn"
                failed = await c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "fail: x"}]})
                assert "error" in failed
                async with d.acp("coder") as k:
                    await k.init()
                    ksid = await k.new()
                    rid = await k.prompt(ksid, "slow: x")
                    await k.until(lambda: len(k.chunks(ksid)) >= 2)
                    during = samples((await d.get("/metrics"))[1].decode())
                    await k.write({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": ksid}})
                    assert (await k.response(rid))["result"] == {"stopReason": "cancelled"}
            if HAS_WS:
                await _chat_turn(d.url)
            # chat:end reaches the client before the turn's metrics are counted (after the store).
            with trio.fail_after(5):
                while True:
                    text = (await d.get("/metrics"))[1].decode()
                    if not HAS_WS or value(samples(text), "agent_bridge_turns_total", route="demo", outcome="end_turn") == 2:
                        break
                    await trio.sleep(0.05)
    m = samples(text)
    assert value(during, "agent_bridge_child_processes") >= 1
    assert value(during, "agent_bridge_turns_running", route="coder") == 1
    assert value(during, "agent_bridge_open_connections", front="acp") == 2
    assert value(during, "agent_bridge_sessions_live", route="demo") == 1

    assert value(m, "agent_bridge_sessions_opened_total", route="demo") == (2 if HAS_WS else 1)
    assert value(m, "agent_bridge_sessions_opened_total", route="coder") == 1
    assert value(m, "agent_bridge_turns_total", route="demo", outcome="end_turn") == (2 if HAS_WS else 1)
    assert value(m, "agent_bridge_turns_total", route="demo", outcome="failed") == 1
    assert value(m, "agent_bridge_turns_total", route="coder", outcome="cancelled") == 1
    assert value(m, "agent_bridge_back_errors_total", route="demo", kind="BackError") == 1
    assert value(m, "agent_bridge_turn_duration_seconds_count", route="demo") == (3 if HAS_WS else 2)
    assert value(m, "agent_bridge_turn_first_event_seconds_count", route="coder") == 1
    assert value(m, "agent_bridge_events_relayed_total", protocol="acp") > 10
    if HAS_WS:
        assert value(m, "agent_bridge_events_relayed_total", protocol="chat") > 3
    assert value(m, "agent_bridge_open_connections", front="acp") == 0
    assert value(m, "agent_bridge_open_connections", front="http") == 1  # this very request
    assert value(m, "agent_bridge_open_connections", front="ws") == 0
    assert value(m, "process_resident_memory_bytes") > 0


async def _chat_turn(url: str) -> None:
    import httpx
    from trio_websocket import open_websocket_url

    async with httpx.AsyncClient(base_url=url) as h:
        sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
    async with open_websocket_url(url.replace("http://", "ws://") + "/ws") as ws:
        await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "hello"}}))
        while json.loads(await ws.get_message())["event"] != "chat:end":
            pass


async def test_json_logs_carry_ids_and_never_a_secret(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    """The secret arrives as a systemd credential, reaches an agent through its env, and the
    agent prints it on stderr: the daemon logs that line redacted."""
    secret = "s3cr3t-Value-0042"
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "agent-bridge_MY_TOKEN").write_text(secret + "\n")
    leaky = ["/bin/sh", "-c", 'echo "my token is $TOKEN, header Authorization: Bearer abcdef0123456789" >&2; exit 3']
    routes = {"leaky": {"back": {"kind": "acp", "command": leaky, "env": {"TOKEN": {"env": "MY_TOKEN"}}}}}
    config = base_config(tmp_path, routes)
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    with trio.fail_after(40):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, args=("--log-format", "json"), extra_env=env) as d:
            async with d.acp("leaky") as c:
                await c.init()
                sid = await c.new()
                failed = await c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
                assert "error" in failed
            await trio.sleep(0.3)
            text = d.log_text()
    assert secret not in text and "abcdef0123456789" not in text
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    leaked = [r for r in records if "my token is" in r["msg"]]
    assert leaked and "my token is ***" in leaked[0]["msg"] and "Bearer ***" in leaked[0]["msg"], leaked
    assert leaked[0]["route"] == "leaky" and leaked[0]["session"] == sid
    turn_lines = [r for r in records if r["msg"].startswith("turn ended")]
    assert turn_lines and {"route", "session", "turn", "ts", "level", "logger"} <= set(turn_lines[0]), turn_lines
    assert any("credentials exported to the environment: MY_TOKEN" in r["msg"] for r in records)


# -- the formatter on its own -------------------------------------------------------------------


def _record(msg: str, *args: Any, level: int = logging.INFO, exc: bool = False, **extra: Any) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("failed with token=abcdef99999")
        except RuntimeError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("bridge.test", level, __file__, 1, msg, args, exc_info)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_rotating_secrets_are_kept_to_the_newest() -> None:
    """An OAuth subject token is registered at each token request, and rotates (every few
    minutes for some workload identities): the newest are redacted, the registry stays
    bounded, and a secret registered for good is never pushed out by them."""
    logs.add_secret("pinned-secret-of-the-route")
    for i in range(500):
        logs.add_secret(f"subject-token-{i:06d}", rotating=True)
    assert len(logs._rotating) <= 16 and logs._secret_re is not None and len(logs._secret_re.pattern) < 2000
    assert logs.redact("sent subject-token-000499 and pinned-secret-of-the-route") == "sent *** and ***"


def test_redaction_of_registered_secrets_and_credential_shapes() -> None:
    logs.add_secret("hunter2-long-password")
    logs.add_secret("abc")  # too short to register: it would redact ordinary words
    assert logs.redact("login with hunter2-long-password ok") == "login with *** ok"
    assert logs.redact("the abc of it") == "the abc of it"
    assert logs.redact("Authorization: Bearer eyJhbGciOi.xyz") == "Authorization: Bearer ***"
    assert logs.redact('{"api_key": "k-123456"}') == '{"api_key": "***"}'
    assert logs.redact("url?token=abcdef&x=1") == "url?token=***&x=1"
    assert logs.redact("max_tokens: 12, turn_timeout_s=30") == "max_tokens: 12, turn_timeout_s=30"


def test_text_and_json_formats_with_ids_from_the_context() -> None:
    token = logs.set_log_ids(route="r1", session="s1")
    try:
        text = logs.TextFormatter().format(_record("hello %s", "world", turn="t1"))
        assert text.endswith("INFO bridge.test [route=r1 session=s1 turn=t1]: hello world")
        data = json.loads(logs.JsonFormatter().format(_record("boom", level=logging.ERROR, exc=True)))
    finally:
        logs.log_ids.reset(token)
    assert data["level"] == "error" and data["route"] == "r1" and data["session"] == "s1" and "turn" not in data
    assert "RuntimeError" in data["exc"] and "abcdef99999" not in data["exc"]
    assert data["ts"].endswith("Z")


def test_under_journald_lines_carry_their_priority() -> None:
    out = logs.TextFormatter(journal=True).format(_record("careful\nsecond line", level=logging.WARNING))
    assert out.splitlines() == ["<4>WARNING bridge.test: careful", "<4>second line"]


# -- the cluster's counts and the store's readiness (bridge/metrics.py, bridge/doctor.py) ---------


def test_cluster_counts_are_read_at_scrape_time_and_absent_for_a_daemon_alone() -> None:
    from bridge.metrics import Metrics

    metrics = Metrics()
    assert "agent_bridge_cluster" not in metrics.render().decode()  # no cluster: no series
    stats = {"leases": 2, "forwarded": 5, "served": 3, "forward_failures": 1}
    metrics.cluster = lambda: stats
    m = samples(metrics.render().decode())
    assert value(m, "agent_bridge_cluster_leases") == 2
    assert value(m, "agent_bridge_cluster_forwarded_total") == 5
    assert value(m, "agent_bridge_cluster_served_total") == 3
    assert value(m, "agent_bridge_cluster_forward_failures_total") == 1
    stats["leases"], stats["forwarded"] = 0, 6
    m = samples(metrics.render().decode())
    assert value(m, "agent_bridge_cluster_leases") == 0 and value(m, "agent_bridge_cluster_forwarded_total") == 6


class _PingedStore:
    """A store that answers `ping` as told: a round trip, an error, or never."""

    def __init__(self) -> None:
        self.answer: Any = 0.002
        self.pings = 0

    async def ping(self) -> float:
        self.pings += 1
        if self.answer == "never":
            await trio.sleep_forever()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return float(self.answer)


class _NoSources:
    def source(self, name: str) -> None:
        return None


class _Manager:
    def __init__(self, store: Any) -> None:
        from bridge.config import parse_config

        self.config = parse_config({"routes": {"demo": demo_route()}, "daemon": {"probe_timeout_s": 2}})
        self.store = store
        self.accepting = True
        self.prompts = _NoSources()

    def back_for(self, name: str) -> Any:
        from bridge.errors import BridgeError

        raise BridgeError("not made here")  # the probe makes its own (demo: always ok)


async def _readyz(app: Any, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/readyz", "headers": [(b"host", b"127.0.0.1"), *(headers or [])],
             "query_string": b"", "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}  # fmt: skip
    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


async def test_readyz_pings_a_postgresql_store_bounded_and_shared(autojump_clock: Any) -> None:
    from bridge.doctor import STORE_PING_EVERY_S, Readiness
    from bridge.errors import BackUnavailable
    from bridge.fronts.http import HttpApp
    from bridge.health import AdminToken, register

    store = _PingedStore()
    readiness = Readiness(_Manager(store))
    readiness.listeners_ready = readiness.store_ready = True
    app = HttpApp()
    register(app, readiness=readiness, admin=AdminToken("adm1n-token", configured=True))
    admin = [(b"authorization", b"Bearer adm1n-token")]

    assert await _readyz(app) == (200, {"status": "ready"})
    status, body = await _readyz(app, admin)
    assert status == 200 and body["store"] is True and body["store_detail"] == "2.0 ms round trip"
    assert store.pings == 1  # the second answer shared the first ping

    store.answer = BackUnavailable("connection to the database lost")
    await trio.sleep(STORE_PING_EVERY_S)
    assert await _readyz(app) == (503, {"status": "not ready", "reason": "the store does not answer"})
    status, body = await _readyz(app, admin)
    assert status == 503 and body["store"] is False and body["store_detail"] == "connection to the database lost"

    store.answer = "never"  # a database that hangs: the ping is bounded by probe_timeout_s
    await trio.sleep(STORE_PING_EVERY_S)
    status, body = await _readyz(app, admin)
    assert status == 503 and body["store_detail"] == "no answer within 2 s"

    store.answer = 0.0005
    await trio.sleep(STORE_PING_EVERY_S)
    assert await _readyz(app) == (200, {"status": "ready"})
    readiness.manager.accepting = False
    assert await _readyz(app) == (503, {"status": "not ready", "reason": "stopping"})
