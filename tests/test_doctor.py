"""`agent-bridge doctor`: the config validated, each route's back and each MCP prompt
source tried once (bridge/doctor.py); `/readyz` reports the daemon's prompt sources."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from daemon_support import base_config, demo_route, start_daemon, toml
from mcp_support import EVERYTHING_JS, PROMPTS_SERVER, TEAM_PROMPTS, Control, everything_http, node_and_everything

PEERS = Path(__file__).resolve().parent / "peers"
HAS_A2A_SDK = importlib.util.find_spec("a2a") is not None and importlib.util.find_spec("uvicorn") is not None


async def _doctor(bridge_exe: list[str], config: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = await trio.run_process(
        [*bridge_exe, "doctor", "--config", str(config)], capture_stdout=True, capture_stderr=True, check=False, env=env
    )
    return proc.returncode, proc.stdout.decode() + proc.stderr.decode()


def _rows(out: str) -> dict[str, list[str]]:
    """NAME → [KIND, STATUS, line]: columns are two or more spaces apart ("mcp prompts",
    "not checked" have one)."""
    rows = {}
    for line in out.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        if len(parts) >= 3 and parts[0] not in ("ROUTE", "PROMPT SOURCE", "STORE", "SETUP") and not line.startswith("config "):
            rows[parts[0]] = [parts[1], parts[2], line]
    return rows


def _closed_port() -> socket.socket:
    """A 127.0.0.1 port bound but not listening: a connection to it is refused (keep it open while used)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


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
    assert code == 0 and "ok, 1 route, 0 prompt sources" in out and _rows(out)["demo"][1] == "ok", out
    assert "PROMPT SOURCE" not in out, out  # no sources, no section for them


async def test_doctor_checks_a_postgresql_store(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], pg_url: str) -> None:
    import psycopg

    from bridge.store.pg import PgStore
    from bridge.store.sqlite_schema import SCHEMA_VERSION

    async def doctor(store: dict[str, str], env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
        config = tmp_path / "pg.toml"
        config.write_text(toml({"routes": {"demo": demo_route()}, "store": store, "daemon": {"probe_timeout_s": 5}}))
        code, out = await _doctor(bridge_exe, config, {**clean_env, **(env or {})})
        assert "STORE" in out, out
        return code, _rows(out)["store"], out

    with trio.fail_after(60):
        code, row, out = await doctor({"url_env": "BRIDGE_PG"}, {"BRIDGE_PG": pg_url})
        assert code == 0 and row[:2] == ["postgresql", "ok"], out
        assert "reached" in row[2] and "ms round trip" in row[2] and "no schema yet" in row[2], out
        store = PgStore(pg_url)  # a daemon's store made the schema
        await store.open()
        await store.close()
        code, row, out = await doctor({"url": pg_url})
        assert code == 0 and row[1] == "ok" and f"schema version {SCHEMA_VERSION}" in row[2] and "ms round trip" in row[2], out
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE bridge_meta SET value = '99' WHERE key = 'schema_version'")
        code, row, out = await doctor({"url": pg_url})
        assert code == 1 and row[1] == "FAILED" and "schema version 99 is newer" in row[2], out

        # Failures say where to look: the variable or file the URL came from, and its host.
        code, row, out = await doctor({"url_env": "BRIDGE_PG_UNSET"})
        assert code == 1 and row[1] == "FAILED" and "$BRIDGE_PG_UNSET ([store] url_env) is not set" in row[2], out
        gone = tmp_path / "no-server-here"
        secret = tmp_path / "pg.url"
        secret.write_text(f"postgresql://bridge:hunter2secret@/db?host={gone}\n")
        code, row, out = await doctor({"url_file": str(secret)})
        assert code == 1 and row[1] == "FAILED", out
        assert str(gone) in row[2] and f"{secret} ([store] url_file)" in row[2], out
        assert "hunter2secret" not in out


async def test_doctor_on_a_bad_config_exits_78_with_every_problem(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[routes.a]\nback = { kind = "nope" }\n[daemon]\nacp_socket = "relative.sock"\n')
    code, out = await _doctor(bridge_exe, config, clean_env)
    assert code == 78, out
    assert "$.routes.a" in out and "$.daemon" in out and "absolute path" in out, out


# -- MCP prompt sources ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    return node_and_everything()


async def test_doctor_initializes_and_lists_each_prompt_source(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], node: str
) -> None:
    # The reference server over stdio and over Streamable HTTP (shared sources), and our
    # SDK server as a route's own source: 3 prompts, listed two a page.
    Control(tmp_path / "team.json", [dict(p) for p in TEAM_PROMPTS])
    with trio.fail_after(90):
        async with everything_http(node, tmp_path / "everything.log") as url:
            doc = base_config(tmp_path, {}, daemon={"probe_timeout_s": 30})
            doc["prompt_sources"] = [
                {"name": "everything", "command": [node, str(EVERYTHING_JS), "stdio"]},
                {"name": "everything-http", "url": url},
            ]
            route = demo_route()
            route["prompt_sources"] = [{"name": "team", "command": [sys.executable, str(PROMPTS_SERVER), str(tmp_path / "team.json")]}]
            doc["routes"] = {"demo": route}
            config = tmp_path / "doctor.toml"
            config.write_text(toml(doc))
            code, out = await _doctor(bridge_exe, config, clean_env)
    assert code == 0, out
    assert "ok, 1 route, 3 prompt sources" in out, out
    rows = _rows(out)
    assert rows["demo"][:2] == ["demo", "ok"], out
    for name, transport in [("everything", "stdio"), ("everything-http", "Streamable HTTP")]:
        kind, status, line = rows[name]
        assert (kind, status) == ("mcp prompts", "ok"), out
        # server-everything's own name and version, from its initialize result.
        assert re.search(rf"everything \S+ initialized \({transport}\); \d+ prompts", line), out
        assert int(re.search(r"(\d+) prompts", line).group(1)) >= 3, out  # type: ignore[union-attr]
    kind, status, line = rows["team"]
    assert (kind, status) == ("mcp prompts", "ok") and "initialized (stdio); 3 prompts" in line, out


async def test_doctor_says_why_a_prompt_source_fails_and_exits_1(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    closed = _closed_port()
    port = closed.getsockname()[1]
    try:
        doc = base_config(tmp_path, {"demo": demo_route()}, daemon={"probe_timeout_s": 20})
        doc["prompt_sources"] = [
            {"name": "missing", "command": ["/nonexistent/prompt-server", "--stdio"]},
            {"name": "refused", "url": f"http://127.0.0.1:{port}/mcp"},
            {"name": "exits", "command": ["/bin/sh", "-c", "echo going >&2; exit 3"]},
        ]
        config = tmp_path / "doctor.toml"
        config.write_text(toml(doc))
        with trio.fail_after(60):
            code, out = await _doctor(bridge_exe, config, clean_env)
    finally:
        closed.close()
    # Every back works: the failing sources alone make the exit status 1.
    assert code == 1, out
    rows = _rows(out)
    assert rows["demo"][:2] == ["demo", "ok"], out
    assert rows["missing"][:2] == ["mcp prompts", "FAILED"], out
    assert "cannot start '/nonexistent/prompt-server'" in rows["missing"][2] and "No such file" in rows["missing"][2], out
    assert rows["refused"][:2] == ["mcp prompts", "FAILED"], out
    assert "ConnectError" in rows["refused"][2] and f"127.0.0.1:{port}" in rows["refused"][2], out
    assert rows["exits"][:2] == ["mcp prompts", "FAILED"] and "closed" in rows["exits"][2].lower(), out


async def test_doctor_gives_a_silent_prompt_source_probe_timeout_s_then_ends_it(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    pidfile = tmp_path / "server.pid"
    doc = base_config(tmp_path, {"demo": demo_route()}, daemon={"probe_timeout_s": 1})
    doc["prompt_sources"] = [{"name": "silent", "command": ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"]}]
    config = tmp_path / "doctor.toml"
    config.write_text(toml(doc))
    started = trio.current_time()
    with trio.fail_after(30):
        code, out = await _doctor(bridge_exe, config, clean_env)
    assert trio.current_time() - started < 20, out
    assert code == 1, out
    kind, status, line = _rows(out)["silent"]
    assert (kind, status) == ("mcp prompts", "FAILED") and "no answer within 1 s" in line, out
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server did not outlive doctor


_NO_SDK = """
import sys, trio
from bridge.config import load_config
from bridge.doctor import check
routes, sources, store = trio.run(check, load_config(sys.argv[1]))
assert sources == [] and store == [] and routes[0].ok, (routes, sources, store)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types", "httpx2")))
"""


async def test_doctor_without_prompt_sources_does_not_load_the_mcp_sdk(tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = tmp_path / "ok.toml"
    config.write_text(toml({"routes": {"demo": demo_route()}}))
    with trio.fail_after(60):
        proc = await trio.run_process([sys.executable, "-c", _NO_SDK, str(config)], capture_stdout=True, env=clean_env)
    assert proc.stdout.decode().strip() == "[]"


async def test_readyz_reports_the_daemons_prompt_sources(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    Control(tmp_path / "team.json", [dict(p) for p in TEAM_PROMPTS])
    doc = base_config(tmp_path, {"demo": demo_route()}, daemon={"probe_interval_s": 0}, server={"admin_token_file": str(tmp_path / "admin")})
    (tmp_path / "admin").write_text("adm\n")  # /readyz details need the admin token
    doc["prompt_sources"] = [
        {"name": "team", "command": [sys.executable, str(PROMPTS_SERVER), str(tmp_path / "team.json")]},
        {"name": "missing", "command": ["/nonexistent/prompt-server"], "retry_initial_s": 30},
    ]
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, doc) as d:
            while True:
                async with httpx.AsyncClient(timeout=10) as h:
                    r = await h.get(d.url + "/readyz", headers={"authorization": "Bearer adm"})
                status, ready = r.status_code, r.json()
                sources = ready["prompt_sources"]
                if all(s["status"] != "not checked" for s in sources.values()):
                    break
                assert all(s["detail"] == "starting" for s in sources.values() if s["status"] == "not checked"), ready
                await trio.sleep(0.1)
    # A source that is down is reported; the daemon is still ready (as for a back).
    assert status == 200 and ready["status"] == "ready", ready
    assert sources["team"]["kind"] == "mcp prompts" and sources["team"]["status"] == "ok", ready
    assert sources["team"]["detail"].endswith("initialized (stdio); 3 prompts"), ready
    assert sources["missing"]["status"] == "FAILED" and "cannot start" in sources["missing"]["detail"], ready
