"""`agent-bridge acp ROUTE --connect`: an editor's stdio relayed to the daemon (bridge/shim.py,
bridge/fronts/acp/unix_socket.py), with the official ACP Python SDK as the editor, in its own process
(tests/peers/acp_shim_editor.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from daemon_support import alive, base_config, demo_route, start_daemon

EDITOR = Path(__file__).resolve().parent / "peers" / "acp_shim_editor.py"


async def _editor(scenario: str, opts: dict[str, Any], command: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = await trio.run_process(
        [sys.executable, str(EDITOR), scenario, json.dumps(opts), *command],
        capture_stdout=True, capture_stderr=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


async def test_an_editor_killed_and_restarted_gets_its_session_back(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    config = base_config(tmp_path, {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0)})
    work = tmp_path / "project"
    work.mkdir()
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            shim_cmd = [*bridge_exe, "acp", "demo", "--connect", d.acp_socket]
            opts = {"cwd": str(work)}
            first = await trio.lowlevel.open_process(
                [sys.executable, str(EDITOR), "first", json.dumps(opts), *shim_cmd],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env,
            )  # fmt: skip
            lines: list[dict[str, Any]] = []
            buf = b""
            with trio.fail_after(30):
                while not any(m.get("streaming") for m in lines):
                    chunk = await first.stdout.receive_some()  # type: ignore[union-attr]
                    assert chunk, "the editor exited early"
                    buf += chunk
                    *done, buf = buf.split(b"\n")
                    lines += [json.loads(x) for x in done if x.strip()]
            sid, shim_pid = lines[0]["session_id"], lines[0]["shim_pid"]
            assert alive(shim_pid)
            first.kill()  # the editor dies mid-turn, without a word
            await first.wait()
            # Its shim sees stdin close and ends; the daemon keeps the session.
            with trio.fail_after(10):
                while alive(shim_pid):
                    await trio.sleep(0.05)

            report = await _editor("load", {**opts, "session_id": sid}, shim_cmd, clean_env)
            assert "result" in report["results"]["load"], report
            listed = [s["sessionId"] for s in report["results"]["list"]["result"]["sessions"]]
            assert sid in listed
            history = report["history"]
            said = "".join(u["content"]["text"] for u in history if u.get("sessionUpdate") == "user_message_chunk")
            assert "hello there" in said and "slow: x" in said
            answered = [u for u in history if u.get("sessionUpdate") == "agent_message_chunk"]
            assert len(answered) >= 4  # the finished turn's answer, and the start of the cut one
            assert report["results"]["prompt"]["result"]["stopReason"] == "end_turn"
            assert (await d.get("/healthz"))[0] == 200


async def test_no_daemon_gives_the_editor_a_clear_error_not_a_hang(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    missing = tmp_path / "nobody-here.sock"
    with trio.fail_after(30):
        report = await _editor("init", {}, [*bridge_exe, "acp", "demo", "--connect", str(missing)], clean_env)
    error = report["results"]["initialize"]["error"]
    assert "daemon is not running" in error["message"] and str(missing) in error["message"], error
    assert report["elapsed_s"] < 10


async def test_an_unknown_route_is_refused_with_the_routes_there_are(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            report = await _editor("init", {}, [*bridge_exe, "acp", "nope", "--connect", d.acp_socket], clean_env)  # type: ignore[list-item]
    error = report["results"]["initialize"]["error"]
    assert "no route named 'nope'" in error["message"] and "demo" in error["message"], error


async def test_the_default_socket_is_found_from_the_environment(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {**clean_env, "XDG_RUNTIME_DIR": str(runtime)}
    config = base_config(tmp_path, {"demo": demo_route()}, daemon={"acp_socket": True})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, env, config) as d:
            assert d.acp_socket == str(runtime / "agent-bridge" / "acp.sock")
            report = await _editor("init", {}, [*bridge_exe, "acp", "demo", "--connect"], env)
            assert report["results"]["initialize"]["result"]["agentInfo"]["name"] == "agent-bridge"
            d.signal(signal.SIGTERM)
            assert await d.wait() == 0


def test_the_shim_loads_no_event_loop_server_or_client() -> None:
    """`--connect` is what an editor spawns: it starts on the standard library alone."""
    probe = (
        "import sys, json\n"
        "sys.argv = ['agent-bridge', 'acp', 'demo', '--connect', '/nonexistent/acp.sock']\n"
        "import bridge.cli\n"
        "try:\n"
        "    bridge.cli.main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'hypercorn', 'httpx', 'msgspec', 'prometheus_client'))\n"
        "print(json.dumps([code, heavy]), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    code, heavy = json.loads(proc.stderr.strip().splitlines()[-1])
    assert code == 69 and heavy == []
