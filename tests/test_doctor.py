"""`agent-bridge doctor`: the config validated, each route's back tried once (bridge/doctor.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from daemon_support import demo_route, toml

PEERS = Path(__file__).resolve().parent / "peers"
HAS_A2A_SDK = importlib.util.find_spec("a2a") is not None and importlib.util.find_spec("uvicorn") is not None


async def _doctor(bridge_exe: list[str], config: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = await trio.run_process(
        [*bridge_exe, "doctor", "--config", str(config)], capture_stdout=True, capture_stderr=True, check=False, env=env
    )
    return proc.returncode, proc.stdout.decode() + proc.stderr.decode()


def _rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0] not in ("ROUTE", "config"):
            status = "not checked" if parts[2] == "not" else parts[2]
            rows[parts[0]] = [parts[1], status, line]
    return rows


async def test_doctor_says_what_works_and_why_not(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    child = tmp_path / "child.toml"
    child.write_text(toml({"routes": {"demo": demo_route()}}))
    routes = {
        "demo": demo_route(),
        "agent": {"back": {"kind": "acp", "command": [*bridge_exe, "acp", "demo", "--config", str(child), "--state-dir", str(tmp_path / "cs")]}},
        "missing": {"back": {"kind": "acp", "command": ["/nonexistent/agent", "--acp"]}},
        "crashes": {"back": {"kind": "acp", "command": ["/bin/sh", "-c", "echo dying >&2; exit 7"]}},
        "far": {"back": {"kind": "a2a", "url": "http://127.0.0.1:9/agent", "connect_timeout_s": 2}},
    }
    config = tmp_path / "doctor.toml"
    config.write_text(toml({"routes": routes}))
    with trio.fail_after(60):
        code, out = await _doctor(bridge_exe, config, clean_env)
    assert code == 1, out
    rows = _rows(out)
    assert rows["demo"][:2] == ["demo", "ok"], out
    assert rows["agent"][:2] == ["acp", "ok"] and "initialized (ACP protocol version 1)" in rows["agent"][2], out
    assert rows["missing"][:2] == ["acp", "FAILED"] and "not found" in rows["missing"][2], out
    assert rows["crashes"][:2] == ["acp", "FAILED"] and "exit" in rows["crashes"][2], out
    assert rows["far"][:2] == ["a2a", "FAILED"] and "127.0.0.1:9" in rows["far"][2], out


@pytest.mark.skipif(not HAS_A2A_SDK, reason="the A2A SDK test peer (a2a-sdk, uvicorn) is not installed")
async def test_doctor_reads_an_a2a_agents_card(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        peer = await trio.lowlevel.open_process(
            [sys.executable, str(PEERS / "a2a_agent.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env
        )
        try:
            buf = b""
            while b"\n" not in buf:
                chunk = await peer.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, "the A2A peer exited"
                buf += chunk
            port = int(buf.split(b"\n")[0].split()[1])
            config = tmp_path / "doctor.toml"
            config.write_text(toml({"routes": {"agent": {"back": {"kind": "a2a", "url": f"http://127.0.0.1:{port}"}}}}))
            code, out = await _doctor(bridge_exe, config, clean_env)
        finally:
            peer.terminate()
            await peer.wait()
    assert code == 0, out
    row = _rows(out)["agent"]
    assert row[:2] == ["a2a", "ok"] and "agent card" in row[2], out


async def test_doctor_all_ok_exits_0(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = tmp_path / "ok.toml"
    config.write_text(toml({"routes": {"demo": demo_route()}}))
    code, out = await _doctor(bridge_exe, config, clean_env)
    assert code == 0 and "ok, 1 routes" in out and _rows(out)["demo"][1] == "ok", out


async def test_doctor_on_a_bad_config_exits_78_with_every_problem(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[routes.a]\nback = { kind = "nope" }\n[daemon]\nacp_socket = "relative.sock"\n')
    code, out = await _doctor(bridge_exe, config, clean_env)
    assert code == 78, out
    assert "$.routes.a" in out and "$.daemon" in out and "absolute path" in out, out
