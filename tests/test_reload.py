"""SIGHUP reload of the real daemon (bridge/reload.py): a bad file keeps the running
configuration; routes added, changed and removed while a turn runs. Then, without a
daemon: removed routes' backs are closed, and secrets are registered for redaction."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from daemon_support import Notifications, base_config, demo_route, start_daemon, toml


async def _reload(d, notify: Notifications, n: int) -> None:  # type: ignore[no-untyped-def]
    """SIGHUP and wait for the n-th READY=1 after it."""
    d.signal(signal.SIGHUP)
    await notify.wait_for(lambda s: s.count("READY") >= n and s[-1] == "READY" and "RELOADING" in s)


async def test_a_bad_file_keeps_the_running_configuration(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    notify = Notifications(tmp_path / "notify.sock")
    config = base_config(tmp_path, {"demo": demo_route()})
    try:
        with trio.fail_after(40):
            async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
                await notify.wait_for(lambda s: s == ["READY"])
                for n, text in enumerate(
                    [
                        "this is [not toml",
                        toml(base_config(tmp_path, {"demo": {"back": {"kind": "demo", "chunk_delay": 1}}})),
                        toml(base_config(tmp_path, {})),
                    ],
                    start=2,
                ):
                    d.config.write_text(text)
                    await _reload(d, notify, n)
                    last = [m for _, m in notify.snapshot() if m.get("READY") == "1"][-1]
                    assert "reload failed" in last["STATUS"], last
                log = d.log_text()
                assert "not valid TOML" in log
                assert "$.routes.demo.back.chunk_delay: unknown key" in log
                assert "$.routes: at least one route is needed" in log
                # Still serving the old configuration, on new connections too.
                async with d.acp("demo") as c:
                    await c.init()
                    sid = await c.new()
                    assert (await c.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})) == {
                        "stopReason": "end_turn"
                    }
                status, body = await d.get("/metrics")
                assert b'agent_bridge_reloads_total{result="failed"} 3.0' in body
    finally:
        notify.close()


async def test_routes_added_changed_and_removed_while_a_turn_runs(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    notify = Notifications(tmp_path / "notify.sock")
    routes = {
        "keep": {**demo_route(), "title": "Old title"},
        "gone": demo_route(chunk_delay_s=0.05, slow_duration_s=2.0),
    }
    config = base_config(tmp_path, routes)
    try:
        with trio.fail_after(60):
            async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
                await notify.wait_for(lambda s: s == ["READY"])
                async with d.acp("gone") as old:
                    await old.init()
                    sid = await old.new()
                    rid = await old.prompt(sid, "slow: x")
                    await old.until(lambda: len(old.chunks(sid)) >= 3)

                    new_routes = {"keep": {**demo_route(), "title": "New title"}, "added": demo_route()}
                    d.config.write_text(toml(base_config(tmp_path, new_routes)))
                    await _reload(d, notify, 2)
                    assert "reloaded: 2 routes; added: added; changed: keep; removed: gone" in d.log_text()

                    # The new route takes sessions; the changed one shows its new title.
                    async with d.acp("added") as c:
                        await c.init()
                        s2 = await c.new()
                        assert (await c.result("session/prompt", {"sessionId": s2, "prompt": [{"type": "text", "text": "hi"}]})) == {
                            "stopReason": "end_turn"
                        }
                    async with d.acp("keep") as c:
                        assert (await c.init())["agentInfo"]["title"] == "New title"
                    # The removed route takes no new connection and no new session...
                    stream = await trio.open_unix_socket(d.acp_socket)  # type: ignore[arg-type]
                    async with stream:
                        await stream.send_all(b'{"route": "gone"}\n')
                        answer = await stream.receive_some(4096)
                    assert b"no route named 'gone'" in answer
                    refused = await old.call("session/new", {"cwd": "/tmp", "mcpServers": []})
                    assert "gone" in refused["error"]["message"]

                    # ...but its running turn finishes, within reload_grace_s (300 s by default).
                    done = await old.response(rid, timeout=20)
                    assert done["result"] == {"stopReason": "end_turn"}, done
                    assert "".join(old.chunks(sid)).strip()
                    # No new turn in that session: its route is gone, and so, once its turn ended, is it.
                    again = await old.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "more"}]})
                    assert again["error"]["code"] == -32002, again  # not found (ACP)
                    assert "removed" in again["error"]["message"] or "closed" in again["error"]["message"], again
    finally:
        notify.close()


async def test_a_removed_routes_turn_is_cancelled_after_the_grace_period(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    routes = {"keep": demo_route(), "gone": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0)}
    config = base_config(tmp_path, routes, daemon={"reload_grace_s": 0.5})
    with trio.fail_after(40):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with d.acp("gone") as old:
                await old.init()
                sid = await old.new()
                rid = await old.prompt(sid, "slow: x")
                await old.until(lambda: len(old.chunks(sid)) >= 2)
                d.config.write_text(toml(base_config(tmp_path, {"keep": demo_route()}, daemon={"reload_grace_s": 0.5})))
                d.signal(signal.SIGHUP)
                done = await old.response(rid, timeout=15)
                assert done["result"] == {"stopReason": "cancelled"}, done
            assert "turn(s) of removed routes cancelled after 0.5 s" in d.log_text()


async def test_the_backs_of_removed_routes_are_closed_even_when_one_raises() -> None:
    """`Back.aclose` is part of the protocol (bridge/backs/base.py): every removed
    route's back is closed, and one that raises does not stop the others."""
    from bridge.reload import _retire

    class Manager:
        async def drain(self, grace_s: float, *, sessions: list[object]) -> int:
            return 0

    class Back:
        def __init__(self, fails: bool) -> None:
            self.fails, self.closed = fails, False

        async def aclose(self) -> None:
            self.closed = True
            if self.fails:
                raise OSError("a bug in the back's close")

    backs = [Back(True), Back(False)]
    with trio.fail_after(5):
        await _retire(Manager(), [], backs, 1.0)  # type: ignore[arg-type]
    assert [b.closed for b in backs] == [True, True]


def test_an_a2a_routes_token_is_registered_for_redaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`[routes.NAME.a2a] token_env` / `token_file` (bridge/fronts/a2a/config.py) are
    secrets: FrontKind.route_secrets names them, and they never reach a log line."""
    import bridge.reload
    from bridge.config import parse_config

    monkeypatch.setenv("A2A_ROUTE_TOKEN", "route-token-from-env")
    (tmp_path / "route-token").write_text("route-token-from-file\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    seen: list[str | None] = []
    monkeypatch.setattr(bridge.reload, "add_secret", seen.append)
    config = parse_config(
        {
            "routes": {
                "by-env": {"back": {"kind": "demo"}, "a2a": {"token_env": "A2A_ROUTE_TOKEN"}},
                "by-file": {"back": {"kind": "demo"}, "a2a": {"token_file": "route-token"}},
            }
        }
    )
    bridge.reload.register_secrets(config)
    assert "route-token-from-env" in seen
    assert "route-token-from-file\n" in seen  # add_secret strips it (bridge/logs.py)
