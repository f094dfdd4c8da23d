"""Shared fixtures: the real `agent-bridge` executable and a fresh state directory."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def bridge_exe() -> list[str]:
    """The command that runs the installed `agent-bridge` (console script of this venv)."""
    exe = Path(sys.executable).with_name("agent-bridge")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("agent-bridge")
    assert found, "agent-bridge is not installed: pip install -e '.[test]'"
    return [found]


@pytest.fixture
def state_dir(tmp_path: Path) -> str:
    d = tmp_path / "state"
    d.mkdir()
    return str(d)


@pytest.fixture
def clean_env(state_dir: str) -> dict[str, str]:
    """The environment for a spawned bridge: no inherited config, a private state dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BRIDGE_")}
    env["XDG_STATE_HOME"] = state_dir
    return env


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the whole test run (tests/pg_support.py)."""
    from tests.pg_support import PgServer

    server = PgServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A new, empty database on that server, for one test."""
    return pg_server.fresh_db()
