"""Helpers for the ACP back's tests: agent commands, the process table, the driver.

- `PY_AGENT`: the scriptable agent on the ACP Python SDK (tests/peers/acp_agent_sdk.py).
- `ts_agent_command(node)`: the TypeScript SDK's own example agent, from npm
  (`@agentclientprotocol/sdk`, `dist/examples/agent.js`, run with node).
- `live_pids(marker)` / `wait_gone(...)`: the process table, read from /proc, so a
  test can prove no agent (nor anything it started) outlives its session.
- `open_driver(...)`: `agent-bridge acp ROUTE` driven by an ACP editor built on the
  Python SDK in its own process (tests/peers/acp_driver_back.py), step by step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from npm_support import node_exe, npm_ci

TESTS = Path(__file__).resolve().parent
PEERS = TESTS / "peers"
PY_AGENT = [sys.executable, str(PEERS / "acp_agent_sdk.py")]
DRIVER = PEERS / "acp_driver_back.py"
TS_AGENT_DIR = PEERS / "ts_agent"
TS_SDK = "@agentclientprotocol/sdk"
TS_EXAMPLE = TS_AGENT_DIR / "node_modules" / TS_SDK / "dist" / "examples" / "agent.js"


def marker() -> str:
    """A unique word to put on an agent's command line, found again in /proc."""
    return "acpback-" + uuid.uuid4().hex[:10]


# -- the process table ------------------------------------------------------------------


def _state(pid: int | str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state != b"Z"


def live_pids(mark: str) -> list[int]:
    """Running processes (zombies excluded) whose command line contains `mark`."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if mark.encode() in cmd and pid_alive(int(name)):
            out.append(int(name))
    return out


async def wait_gone(mark: str | None = None, pids: list[int] = (), timeout: float = 15) -> None:  # type: ignore[assignment]
    """Until no process with `mark` and none of `pids` runs; fails with what is left."""
    with trio.move_on_after(timeout):
        while (mark and live_pids(mark)) or any(pid_alive(p) for p in pids):
            await trio.sleep(0.05)
        return
    left = (live_pids(mark) if mark else []) + [p for p in pids if pid_alive(p)]
    raise AssertionError(f"processes outlived their session: {left}")


# -- node and the TypeScript SDK's example agent -----------------------------------------------


def ensure_ts_agent() -> list[str]:
    """node and the example agent of the pinned SDK (`npm ci` from the lockfile once)."""
    node = node_exe()
    npm_ci(TS_AGENT_DIR)
    if not TS_EXAMPLE.exists():
        pinned = json.loads((TS_AGENT_DIR / "package.json").read_text())["dependencies"][TS_SDK]
        pytest.fail(f"{TS_SDK}@{pinned} does not ship {TS_EXAMPLE.relative_to(TS_AGENT_DIR)}", pytrace=False)
    return [node, str(TS_EXAMPLE)]


# -- configuration ---------------------------------------------------------------------------


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def config_toml(routes: dict[str, dict[str, Any]], *, log_level: str = "info") -> str:
    """`{name: {"back": {...}, other route keys...}}` as a config file."""
    out = [f"log_level = {toml_value(log_level)}"]
    for name, route in routes.items():
        out.append(f"[routes.{json.dumps(name)}]")
        out += [f"{k} = {toml_value(v)}" for k, v in route.items()]
    return "\n".join(out) + "\n"


# -- the driver -------------------------------------------------------------------------------


class Driver:
    """One `agent-bridge acp` under an SDK editor; `events` is everything it reported."""

    def __init__(self, proc: trio.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.events: list[dict[str, Any]] = []
        self._changed = trio.Event()
        self._ids = 0

    async def _reader(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        async for data in self.proc.stdout:
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    self.events.append(json.loads(line))
            self._changed.set()
            self._changed = trio.Event()
        self.events.append({"event": "driver-eof"})
        self._changed.set()

    async def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(json.dumps(cmd).encode() + b"\n")

    async def wait(self, pred: Callable[[dict[str, Any]], bool], what: str = "an event", timeout: float = 30) -> dict[str, Any]:
        with trio.move_on_after(timeout):
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                    if e.get("event") == "driver-eof":
                        raise AssertionError(f"driver ended before {what}; bridge log:\n{self.bridge_log()[-3000:]}")
                await self._changed.wait()
        raise AssertionError(f"timed out waiting for {what}; events: {self.events[-10:]}\nlog:\n{self.bridge_log()[-3000:]}")

    async def request(self, cmd: str, *, timeout: float = 30, **kw: Any) -> dict[str, Any]:
        rid = await self.start(cmd, **kw)
        return await self.result(rid, timeout=timeout)

    async def start(self, cmd: str, **kw: Any) -> str:
        self._ids += 1
        rid = f"r{self._ids}"
        await self.send(cmd=cmd, id=rid, **kw)
        return rid

    async def result(self, rid: str, *, timeout: float = 30) -> dict[str, Any]:
        e = await self.wait(lambda e: e.get("event") == "result" and e.get("id") == rid, f"result {rid}", timeout)
        return e

    async def new(self, cwd: str) -> str:
        r = await self.request("new", cwd=cwd)
        assert "result" in r, r
        return r["result"]["sessionId"]

    def updates(self, sid: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            e["update"]
            for e in self.events
            if e.get("event") == "update" and e["sessionId"] == sid and (kind is None or e["update"]["sessionUpdate"] == kind)
        ]

    def text(self, sid: str) -> str:
        return "".join(u["content"].get("text", "") for u in self.updates(sid, "agent_message_chunk"))

    def bridge_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@asynccontextmanager
async def open_driver(
    tmp_path: Path,
    bridge_exe: list[str],
    routes: dict[str, dict[str, Any]],
    route: str,
    *,
    fs: bool = False,
    terminal: bool = False,
    files: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Driver]:
    config = tmp_path / f"config-{route}.toml"
    config.write_text(config_toml(routes))
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    log = tmp_path / f"bridge-{route}.log"
    bridge_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BRIDGE_")}
    bridge_env.update(env or {})
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            partial(trio.run_process, [sys.executable, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, check=False)
        )
        d = Driver(proc, log)
        nursery.start_soon(d._reader)
        argv = [*bridge_exe, "acp", route, "--config", str(config), "--state-dir", str(state)]
        await d.send(cmd="start", argv=argv, env=bridge_env, stderr=str(log), fs=fs, terminal=terminal, files=files or {})
        await d.wait(lambda e: e.get("event") == "started", "the bridge to initialize")
        try:
            yield d
        finally:
            with trio.move_on_after(25, shield=True):
                await d.send(cmd="exit")
                await d.wait(lambda e: e.get("event") in ("exited", "driver-eof"), "the bridge to exit", timeout=25)
            nursery.cancel_scope.cancel()
