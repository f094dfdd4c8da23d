"""A protocol added without touching `bridge/`: tests/plugins/throwaway.py, named in
`plugins`, gives the real `agent-bridge` process an `echo` back and a `throwaway` front
(bridge/registry.py). Shown end to end: the new front on the demo back, an existing
front (A2A) on the new back, `check-config` and `doctor` knowing the new kind, and a
clear config error (exit 78) for a plugin module that is missing, declares nothing,
clashes or exits when imported (tests/test_registry.py: each malformed declaration).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon_support import base_config, demo_route, start_daemon, toml

PLUGINS = Path(__file__).resolve().parent / "plugins"
EX_CONFIG = 78


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(PLUGINS), clean_env.get("PYTHONPATH", "")) if p)
    return {**clean_env, "PYTHONPATH": path, "ECHO_TOKEN": "echo-secret-value"}


def _config(tmp_path: Path, plugins: list[str]) -> dict[str, Any]:
    routes = {
        "demo": demo_route(),
        "echo": {"back": {"kind": "echo", "chunk_chars": 2, "token_env": "ECHO_TOKEN"}, "title": "Echo"},
    }
    return base_config(tmp_path, routes, plugins=plugins, throwaway={"greeting": "hi! "})


async def _run(bridge_exe: list[str], *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await trio.run_process([*bridge_exe, *args], capture_stdout=True, capture_stderr=True, check=False, env=env)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def test_a_plugin_back_and_front_work_end_to_end(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    async with start_daemon(bridge_exe, tmp_path, env, _config(tmp_path, ["throwaway"])) as d:
        async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
            # The new front on a built-in back.
            r = await h.post("/throwaway/demo", json={"prompt": "hello there"})
            assert r.status_code == 200, r.text
            assert r.json() == {"text": "hi! You said: hello there", "stop_reason": "end_turn"}
            # The new front on the new back: the reply came in 2-character chunks, joined.
            r = await h.post("/throwaway/echo", json={"prompt": "abcde"})
            assert r.json() == {"text": "hi! echo: abcde", "stop_reason": "end_turn"}
            # A built-in front (A2A, JSON-RPC 1.0) on the new back.
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "over a2a"}]}}}  # fmt: skip
            r = await h.post("/a2a/echo", json=body, headers={"A2A-Version": "1.0"})
            assert r.status_code == 200, r.text
            task = r.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            assert "echo: over a2a" in "".join(re.findall(r'"text": "([^"]*)"', json.dumps(task))), task
            # Its agent card is the route's, through the back's `ready()`.
            r = await h.get("/a2a/echo/.well-known/agent-card.json")
            assert r.status_code == 200 and r.json()["name"] == "Echo", r.text
            # /readyz probes the new back too (without the admin token: only the verdict).
            status, _ = await d.get("/readyz")
            assert status == 200


async def test_check_config_and_doctor_know_the_plugin(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "plugin.toml"
    path.write_text(toml(_config(tmp_path, ["throwaway"])))
    code, out, err = await _run(bridge_exe, "check-config", str(path), env=env)
    assert code == 0, err
    assert "routes: demo, echo" in out
    code, out, err = await _run(bridge_exe, "doctor", "--config", str(path), env=env)
    assert code == 0, out + err
    echo = next(line for line in out.splitlines() if line.startswith("echo "))
    assert re.split(r"\s{2,}", echo)[1:3] == ["echo", "ok"], out
    assert "echo back (deep check), prefix 'echo: '" in echo


@pytest.mark.parametrize(
    ("plugins", "expected"),
    [
        (["no_such_plugin_module"], "$.plugins[0]: cannot import plugin module 'no_such_plugin_module'"),
        (["throwaway", "declares_nothing"], "$.plugins[1]: plugin module 'declares_nothing' declares no BACK, BACKS, FRONT or FRONTS"),
        (["throwaway", "clashing"], "$.plugins[1]: back kind 'demo' is declared by 'bridge.backs.demo' and 'clashing'"),
        (["throwaway", "exits_at_import"], "$.plugins[1]: plugin module 'exits_at_import' failed to import: SystemExit: 0"),
    ],
)
async def test_a_bad_plugin_is_a_clear_config_error(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str], plugins: list[str], expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml(_config(tmp_path, plugins)))
    code, out, err = await _run(bridge_exe, "check-config", str(path), env=env)
    assert code == EX_CONFIG, (out, err)
    # FILE:LINE: $.path: message (check-config names each problem's line in the file).
    assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(expected)}", err), err
    # The daemon refuses to start the same way (exit 78: systemd does not restart-loop on it).
    code, out, err = await _run(bridge_exe, "serve", "--config", str(path), "--state-dir", str(tmp_path / "s"), env=env)
    assert code == EX_CONFIG, (out, err)
    assert expected in err


async def test_without_the_plugin_its_kind_is_unknown(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "plain.toml"
    doc = _config(tmp_path, [])
    del doc["throwaway"]
    path.write_text(toml(doc))
    code, _, err = await _run(bridge_exe, "check-config", str(path), env=env)
    assert code == EX_CONFIG
    assert re.search(rf"{re.escape(str(path))}:\d+: \$\.routes\.echo\.back\.kind: ", err), err


def test_the_plugins_secrets_are_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bridge/reload.py asks each back kind and front where its secrets are (BackKind.secrets)."""
    import bridge.reload
    from bridge.config import parse_config

    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("ECHO_TOKEN", "echo-secret-value")
    seen: list[str | None] = []
    monkeypatch.setattr(bridge.reload, "add_secret", seen.append)
    bridge.reload.register_secrets(parse_config(_config(tmp_path, ["throwaway"])))
    assert "echo-secret-value" in seen


async def test_a_front_that_fails_to_register_stops_the_start_cleanly(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / "register.toml"
    path.write_text(toml(_config(tmp_path, ["throwaway", "register_fails"])))
    code, _, err = await _run(bridge_exe, "check-config", str(path), env=env)
    assert code == 0, err  # the declaration is valid: only running it fails
    code, out, err = await _run(bridge_exe, "serve", "--config", str(path), "--state-dir", str(tmp_path / "s"), env=env)
    assert code == 70, (out, err)  # EX_SOFTWARE: a bug, not the operator's config
    assert "a front could not register its routes: RuntimeError('this front cannot register')" in err
    assert "listening" not in out
