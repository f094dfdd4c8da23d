"""Peers for the MCP tests: the reference server from npm, our SDK prompts server, configs.

- `node_and_everything()`: node, and `@modelcontextprotocol/server-everything` installed
  from the committed lockfile in tests/peers/mcp_everything (`npm ci` when missing).
  Without node or npm the tests FAIL, they do not skip.
- `Control`: the control file of tests/peers/mcp_prompts_server.py (its prompts; make
  it exit once).
- `everything_http(node)`: server-everything over Streamable HTTP on 127.0.0.1.
- `config_text(...)`: a bridge config (TOML) with the demo route, prompt sources and
  templates.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
from npm_support import node_exe, npm_ci

PEERS = Path(__file__).resolve().parent / "peers"
EVERYTHING_DIR = PEERS / "mcp_everything"
EVERYTHING_PKG = "@modelcontextprotocol/server-everything"
EVERYTHING_JS = EVERYTHING_DIR / "node_modules" / EVERYTHING_PKG / "dist" / "index.js"
EVERYTHING_HTTP = EVERYTHING_DIR / "http.mjs"
PROMPTS_SERVER = PEERS / "mcp_prompts_server.py"


def node_and_everything() -> str:
    node = node_exe()
    npm_ci(EVERYTHING_DIR)
    return node


class Control:
    """The prompts server's control file: what it lists, and a way to make it exit."""

    def __init__(self, path: Path, prompts: list[dict[str, Any]]) -> None:
        self.path = path
        self.exit_token = 0
        self.prompts = prompts
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"prompts": self.prompts, "exit": str(self.exit_token)}))
        tmp.replace(self.path)  # never half written

    def set(self, prompts: list[dict[str, Any]]) -> None:
        self.prompts = prompts
        self._write()

    def crash(self) -> None:
        """The running server exits; the one the bridge starts next stays up."""
        self.exit_token += 1
        self._write()


TEAM_PROMPTS: list[dict[str, Any]] = [
    {
        "name": "greet",
        "description": "Greet someone",
        "arguments": [{"name": "who", "required": True, "values": ["Ada", "Alan", "Grace"]}],
        "text": "Say hello to {who}.",
        "assistant": "Hello!",
    },
    # Also a prompt of server-everything, listed first: this one is shown as team:simple-prompt.
    {"name": "simple-prompt", "description": "The team's simple prompt", "text": "team simple"},
    {"name": "slowly", "description": "A slow demo turn", "text": "slow: taking my time"},
]

TEMPLATES = """
[prompts.review]
description = "Review code"
arguments = [{ name = "focus", required = true, values = ["bugs", "style", "tests"] }]
messages = [{ text = "Review the code for {focus}." }, { role = "assistant", text = "I will start with the riskiest part." }]
"""


def config_text(
    *,
    stdio_everything: str | None = None,
    team_control: Path | None = None,
    http_everything: str | None = None,
    extra: str = "",
    listen: bool = True,
) -> str:
    """A config with route `demo`; sources in this order: everything (stdio), team, everything (http)."""
    lines = []
    if listen:
        lines += ['[server]', 'listen = "127.0.0.1:0"', "graceful_timeout_s = 5", "", "[daemon]", "acp_socket = false", ""]
    lines += ["[routes.demo]", 'description = "The demo agent"', 'back = { kind = "demo", chunk_delay_s = 0.005, slow_duration_s = 20 }', ""]
    if stdio_everything is not None:
        argv = json.dumps([stdio_everything, str(EVERYTHING_JS), "stdio"])
        lines += ["[[prompt_sources]]", 'name = "everything"', f"command = {argv}", "retry_initial_s = 0.2", ""]
    if team_control is not None:
        argv = json.dumps([sys.executable, str(PROMPTS_SERVER), str(team_control)])
        lines += ["[[prompt_sources]]", 'name = "team"', f"command = {argv}", "retry_initial_s = 0.2", "retry_max_s = 1", ""]
    if http_everything is not None:
        lines += ["[[prompt_sources]]", 'name = "everything-http"', f'url = "{http_everything}"', ""]
    return "\n".join(lines) + TEMPLATES + extra


@contextlib.asynccontextmanager
async def everything_http(node: str, log: Path) -> AsyncIterator[str]:
    """server-everything's Streamable HTTP transport on 127.0.0.1 (a port the OS chooses); its URL.

    Its stderr goes to `log` (read for the port), so a chatty server never fills a pipe."""
    with log.open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [node, str(EVERYTHING_HTTP)], cwd=EVERYTHING_DIR, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PORT": "0"}
        )
    try:
        with trio.fail_after(20):
            while not (m := re.search(r"LISTENING (\d+)", log.read_text(errors="replace"))):
                assert proc.returncode is None, f"server-everything exited: {log.read_text(errors='replace')}"
                await trio.sleep(0.05)
        yield f"http://127.0.0.1:{m.group(1)}/mcp"
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def prompts_server_http(control: Control, log: Path, **env: str) -> AsyncIterator[str]:
    """tests/peers/mcp_prompts_server.py over Streamable HTTP on 127.0.0.1, its URL; `env`
    says what it asks of clients (`PROMPTS_TOKEN`, `PROMPTS_INTROSPECT`)."""
    with log.open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(PROMPTS_SERVER), str(control.path), "--http", "0"],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **env},
        )  # fmt: skip
    try:
        with trio.fail_after(20):  # the server says its port on stderr, which goes to a file
            while not (m := re.search(r"LISTENING (\d+)", log.read_text(errors="replace"))):
                assert proc.returncode is None, log.read_text(errors="replace")
                await trio.sleep(0.05)
        yield f"http://127.0.0.1:{m.group(1)}/mcp"
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()
