"""The MCP conformance runner (`@modelcontextprotocol/conformance`, npm) against the bridge's `/mcp`.

The runner needs Node 22; it comes from npm too (the `node` package ships the
binary), pinned with the runner in tests/peers/mcp_conformance/package.json and
installed from its committed lockfile (`npm ci`). Without node and npm this test fails,
it does not skip.

The daemon serves tests/peers/mcp_conformance/conformance.toml: the prompts the
server scenarios ask for, written as templates. Every active server scenario runs;
`baseline.yml` lists those the bridge does not implement (fixture tools called without
arguments, resources, logging, sampling and elicitation): the runner exits 0 only
when exactly those fail, so a regression and a stale baseline both fail this test.
The README's table ("MCP prompts", conformance) is this test's outcome.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import trio

from mcp_support import PEERS
from npm_support import npm_ci

CEILING_S = 240
HERE = PEERS / "mcp_conformance"
RUNNER = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE22 = HERE / "node_modules" / "node" / "bin" / "node"

IMPLEMENTED = {
    "server-initialize",
    "ping",
    "completion-complete",
    "tools-list",
    "server-sse-multiple-streams",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
}


@pytest.fixture(scope="module")
def node22() -> Path:
    npm_ci(HERE)
    version = subprocess.run([str(NODE22), "--version"], capture_output=True, text=True, check=False)
    if version.returncode != 0 or not version.stdout.startswith("v22."):
        pytest.fail(f"the Node 22 from npm does not run here: {version.stdout}{version.stderr}", pytrace=False)
    return NODE22


async def test_conformance_server_scenarios(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, node22: Path) -> None:
    with trio.fail_after(CEILING_S):
        log = tmp_path / "serve.log"
        with log.open("wb") as err:
            proc = await trio.lowlevel.open_process(
                [*bridge_exe, "serve", "--config", str(HERE / "conformance.toml"), "--state-dir", str(tmp_path / "state")],
                stdout=subprocess.PIPE, stderr=err, env=clean_env,
            )  # fmt: skip
        try:
            line = b""
            while b"\n" not in line:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, log.read_text()
                line += chunk
            url = line.split()[1].decode() + "/mcp"
            env = {**clean_env, "PATH": f"{node22.parent}{os.pathsep}{clean_env.get('PATH', '')}"}
            done = await trio.run_process(
                [str(node22), str(RUNNER), "server", "--url", url, "--expected-failures", str(HERE / "baseline.yml")],
                cwd=tmp_path, env=env, capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
        finally:
            with trio.CancelScope(shield=True):
                proc.terminate()
                await proc.wait()
        out = done.stdout.decode() + done.stderr.decode()
        summary = {name: mark for mark, name in re.findall(r"^([✓✗]) (\S+): \d+ passed, \d+ failed$", out, re.M)}
        passed = {name for name, mark in summary.items() if mark == "✓"}
        assert IMPLEMENTED <= passed, out[-4000:]
        assert done.returncode == 0, out[-4000:]
