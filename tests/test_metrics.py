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
