"""`agent-bridge serve --workers N` (bridge/workers.py) and the daemon's cluster wiring
(bridge/daemon.py, `open_runtime`).

The supervisor runs in its own process, as `serve --workers` runs it, over stand-in
workers (a small script that takes the sockets as systemd passes them, says which
worker it is to each connection and exits as asked): so its signals, restarts and
give-ups are checked on real processes without a database. The refusal on SQLite goes
through the real CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.cluster import SoloCluster
from bridge.config import parse_config
from daemon_support import Notifications, alive, base_config, demo_route, toml

# A stand-in worker: serves "INDEX PID NOTIFY" on every connection to the activated HTTP
# socket. FAKE_MODE=fail exits 78 before listening; die exits 3 right after listening;
# die1 does so only as worker 1; boot says "booting" and, signals still at their default
# actions, waits for a byte on the FIFO $FAKE_GO; stubborn does so ignoring SIGTERM.
_WORKER = """
import os, signal, socket, sys
from bridge.systemd import listen_fds
mode, index = os.environ.get("FAKE_MODE", ""), os.environ["AGENT_BRIDGE_WORKER"]
if mode == "fail":
    sys.exit(78)
if mode in ("boot", "stubborn"):
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    go = os.open(os.environ["FAKE_GO"], os.O_RDWR)
    os.write(2, f"worker {index} booting\\n".encode())  # one write: the workers share the pipe
    os.read(go, 1)
found = listen_fds()
http = socket.socket(fileno=next(a.fd for a in found if a.kind == "http"))
def on_signal(signum, frame):
    if signum == signal.SIGHUP:
        os.write(2, f"worker {index} reloaded\\n".encode())
    else:
        sys.exit(0)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on_signal)
print("listening", " ".join(f"{a.name}:{a.fd}" for a in found), flush=True)
if mode == "die" or (mode == "die1" and index == "1"):
    sys.exit(3)
while True:
    conn, _ = http.accept()
    conn.sendall(f"{index} {os.getpid()} {os.environ.get('NOTIFY_SOCKET', '-')}\\n".encode())
    conn.close()
"""

# The supervisor as `serve --workers N` runs it, with a quick restart policy.
_DRIVER = """
import logging, sys, trio
from bridge.config import load_config
from bridge.logs import setup
from bridge.workers import supervise
setup("info")
config = load_config(sys.argv[1])
sys.exit(trio.run(lambda: supervise(config, [sys.executable, sys.argv[2]], int(sys.argv[3]),
                                    restart_delay_s=0.05, max_restarts=int(sys.argv[4]))))
"""


class Supervised:
    """The supervisor process, its stderr read line by line as it comes."""

    def __init__(self, proc: trio.Process, url: str) -> None:
        self.proc = proc
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.lines: list[str] = []
        self._grew = trio.Event()

    async def read_stderr(self) -> None:
        assert self.proc.stderr is not None
        buf = b""
        while chunk := await self.proc.stderr.receive_some(65536):
            buf += chunk
            *done, buf = buf.split(b"\n")
            self.lines += [line.decode(errors="replace") for line in done]
            self._grew.set()
            self._grew = trio.Event()

    async def wait_for(self, pattern: str, count: int = 1) -> list[re.Match[str]]:
        """The first `count` log lines matching `pattern`, once there are that many."""
        while True:
            found = [m for m in map(re.compile(pattern).search, self.lines) if m]
            if len(found) >= count:
                return found[:count]
            await self._grew.wait()

    async def ask(self) -> tuple[int, int, str]:
        """(worker index, pid, its NOTIFY_SOCKET) of whichever worker accepts."""
        stream = await trio.open_tcp_stream(self.host, self.port)
        async with stream:
            data = b""
            while chunk := await stream.receive_some(1024):
                data += chunk
        index, pid, notify = data.decode().split()
        return int(index), int(pid), notify

    async def workers(self, want: set[int]) -> dict[int, int]:
        """index → pid, asking until every index in `want` answered (the kernel picks who accepts)."""
        seen: dict[int, int] = {}
        for _ in range(500):
            index, pid, _notify = await self.ask()
            seen[index] = pid
            if want <= set(seen):
                return seen
        raise AssertionError(f"only workers {sorted(seen)} answered 500 connections")


@contextlib.asynccontextmanager
async def supervised(
    tmp_path: Path, count: int, *, mode: str = "", max_restarts: int = 5, env: dict[str, str] | None = None, listening: bool = True
) -> AsyncIterator[Supervised]:
    config = tmp_path / "workers.toml"
    config.write_text(toml({"routes": {"demo": demo_route()}, "server": {"listen": "127.0.0.1:0"}, "daemon": {"acp_socket": False}}))
    worker = tmp_path / "worker.py"
    worker.write_text(_WORKER)
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _DRIVER, str(config), str(worker), str(count), str(max_restarts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "FAKE_MODE": mode, **(env or {})},
    )
    try:
        async with trio.open_nursery() as nursery:
            assert proc.stdout is not None
            first = b""
            while listening and b"\n" not in first:
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    break
                first += chunk
            words = first.decode().split()
            sup = Supervised(proc, words[1] if words[:1] == ["listening"] else "http://127.0.0.1:0")
            nursery.start_soon(sup.read_stderr)
            yield sup
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_workers_share_the_listener_reload_restart_and_stop_together(tmp_path: Path) -> None:
    notify = Notifications(tmp_path / "notify.sock")
    try:
        with trio.fail_after(60):
            async with supervised(tmp_path, 2, env={"NOTIFY_SOCKET": notify.path}) as sup:
                pids = await sup.workers({1, 2})
                # One READY for the whole service, once both listen; the workers never notify.
                await notify.wait_for(lambda s: "READY" in s)
                assert (await sup.ask())[2] == "-"
                # The sockets came as systemd passes them: named, from descriptor 3.
                listening = await sup.wait_for(r"worker (\d) \(pid \d+\) listening http:3$", 2)
                assert {m.group(1) for m in listening} == {"1", "2"}

                sup.proc.send_signal(signal.SIGHUP)
                await sup.wait_for(r"worker \d reloaded", 2)
                assert alive(pids[1]) and alive(pids[2])

                os.kill(pids[1], signal.SIGKILL)
                await sup.wait_for(rf"worker 1 \(pid {pids[1]}\) killed by SIGKILL")
                _, again = await sup.wait_for(r"worker 1 \(pid (\d+)\) listening", 2)
                assert int(again.group(1)) != pids[1]
                replaced = await sup.workers({1, 2})
                assert replaced[1] == int(again.group(1)) and replaced[2] == pids[2]

                sup.proc.send_signal(signal.SIGTERM)
                assert await sup.proc.wait() == 0
                await sup.wait_for(r"stopped \(status 0\)")
                assert not alive(replaced[1]) and not alive(replaced[2])
                assert notify.states() == ["READY", "STOPPING"]
    finally:
        notify.close()


async def test_a_worker_that_keeps_dying_stops_the_service(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with supervised(tmp_path, 2, mode="die1", max_restarts=2) as sup:
            assert await sup.proc.wait() == 70
            await sup.wait_for(r"worker 1 exited 3 times in 60 s: stopping")
            assert len(await sup.wait_for(r"worker 1 restarts in", 2)) == 2
            # The healthy worker was stopped with it, gracefully.
            await sup.wait_for(r"worker 2 \(pid \d+\) exited with status 0")


async def test_a_worker_that_cannot_start_stops_the_service_with_its_status(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with supervised(tmp_path, 2, mode="fail") as sup:
            assert await sup.proc.wait() == 78
            await sup.wait_for(r"worker \d exited before it listened: stopping")
            assert not any("restarts in" in line for line in sup.lines)


async def test_a_sighup_while_a_worker_starts_reaches_it_once_it_listens(tmp_path: Path) -> None:
    go = tmp_path / "go"
    os.mkfifo(go)
    with trio.fail_after(60):
        async with supervised(tmp_path, 1, mode="boot", env={"FAKE_GO": str(go)}, listening=False) as sup:
            await sup.wait_for(r"worker 1 booting")
            sup.proc.send_signal(signal.SIGHUP)
            await sup.wait_for(r"SIGHUP: each worker reloads")
            fd = os.open(go, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: nobody reads it, the worker died
            os.write(fd, b"x")
            os.close(fd)
            (got,) = await sup.wait_for(r"worker 1 reloaded|worker 1 \(pid \d+\) (exited|killed)")
            assert got.group(0) == "worker 1 reloaded"
            sup.proc.send_signal(signal.SIGTERM)
            assert await sup.proc.wait() == 0
            assert not any("exited before it listened" in line for line in sup.lines)


async def test_a_worker_ended_by_a_signal_exits_128_plus_it_or_0_for_our_own_stop(tmp_path: Path) -> None:
    go = tmp_path / "go"
    os.mkfifo(go)
    with trio.fail_after(60):
        # Stopped while it starts: SIGTERM's default action ends it, as the stop asked.
        async with supervised(tmp_path, 2, mode="boot", env={"FAKE_GO": str(go)}, listening=False) as sup:
            await sup.wait_for(r"worker \d booting", 2)
            sup.proc.send_signal(signal.SIGTERM)
            assert await sup.proc.wait() == 0
        # Killed by another signal during the stop: 128 + 9, as a shell says it.
        async with supervised(tmp_path, 1, mode="stubborn", env={"FAKE_GO": str(go)}, listening=False) as sup:
            (started,) = await sup.wait_for(r"worker 1 started \(pid (\d+)\)")
            await sup.wait_for(r"worker 1 booting")
            sup.proc.send_signal(signal.SIGTERM)
            await sup.wait_for(r"stopping the 1 workers gracefully")
            os.kill(int(started.group(1)), signal.SIGKILL)
            assert await sup.proc.wait() == 128 + signal.SIGKILL


async def test_workers_need_a_postgresql_store(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = tmp_path / "sqlite.toml"
    config.write_text(toml(base_config(tmp_path, {"demo": demo_route()})))
    with trio.fail_after(30):
        done = await trio.run_process(
            [*bridge_exe, "serve", "--config", str(config), "--workers", "2"], capture_stdout=True, capture_stderr=True,
            env=clean_env, check=False,
        )  # fmt: skip
    assert done.returncode == 78
    assert b"--workers needs a PostgreSQL store" in done.stderr and b"SQLite" in done.stderr
    assert done.stdout == b""


def test_log_lines_name_the_worker() -> None:
    import logging

    from bridge.logs import JsonFormatter, TextFormatter, log_ids, set_log_ids

    token = set_log_ids(worker="2", session="s1")
    try:
        record = logging.LogRecord("bridge.daemon", logging.INFO, __file__, 1, "listening", None, None)
        assert "bridge.daemon [worker=2 session=s1]: listening" in TextFormatter().format(record)
        assert '"worker": "2"' in JsonFormatter().format(record)
    finally:
        log_ids.reset(token)


# -- the daemon's cluster (bridge/daemon.py) ----------------------------------------------------


class _RecordingCluster(SoloCluster):
    def __init__(self, events: list[str]) -> None:
        super().__init__("test")
        self.events = events
        self.handler: Any = None

    async def run(self, handler: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.handler = handler
        self.events.append("cluster running")
        try:
            await super().run(handler, task_status=task_status)
        finally:
            self.events.append("cluster stopped")


async def test_the_runtime_runs_a_cluster_before_serving_and_stops_it_after_the_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bridge.daemon as daemon

    events: list[str] = []
    made: dict[str, Any] = {}

    def cluster_for(config: Any, store: Any) -> Any:
        made["cluster"] = _RecordingCluster(events)
        made["store"] = store
        return made["cluster"]

    monkeypatch.setattr(daemon, "_cluster_for", cluster_for)
    config = parse_config({"routes": {"demo": demo_route()}})
    with trio.fail_after(10):
        async with daemon.open_runtime(config, str(tmp_path / "state")) as manager:
            assert events == ["cluster running"]
            assert manager.cluster is made["cluster"] and manager.store is made["store"]
            # Commands other instances forward reach the manager.
            assert made["cluster"].handler == manager.serve_command
            session = await manager.create("demo")
            original_close = session.close

            async def close() -> None:
                events.append("session closed")
                await original_close()

            session.close = close  # type: ignore[method-assign]
    assert events == ["cluster running", "session closed", "cluster stopped"]


def test_the_cluster_is_solo_without_postgresql() -> None:
    from bridge.daemon import _cluster_for
    from bridge.store.memory import MemoryStore

    config = parse_config({"routes": {"demo": demo_route()}})
    assert not config.store.postgres
    assert isinstance(_cluster_for(config, MemoryStore()), SoloCluster)
    for key in ("url", "url_env", "url_file"):
        value = "postgresql:///x" if key == "url" else "X"
        assert parse_config({"routes": {"demo": demo_route()}, "store": {key: value}}).store.postgres
