"""systemd integration of `agent-bridge serve`: sd_notify, the watchdog, socket activation,
exit codes and the unit files (bridge/systemd.py, bridge/service.py, systemd/).

Every test drives the real daemon process with a test `$NOTIFY_SOCKET` listener, except
the in-process watchdog test, which blocks the trio loop on purpose.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from bridge.systemd import Notifier, monotonic_usec
from daemon_support import Notifications, base_config, demo_route, start_daemon

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def notify(tmp_path: Path):  # type: ignore[no-untyped-def]
    listener = Notifications(tmp_path / "notify.sock")
    yield listener
    listener.close()


async def test_notifications_in_order_across_start_reload_and_stop(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], notify: Notifications
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
            await notify.wait_for(lambda s: "READY" in s)
            # READY=1 came after every listener was bound and the store opened: both answer now.
            status, body = await d.get("/readyz")
            assert status == 200, body
            assert d.acp_socket is not None and os.path.exists(d.acp_socket)
            ready = [m for _, m in notify.snapshot() if m.get("READY") == "1"][0]
            assert "routes" in ready["STATUS"] and ready["MAINPID"] == str(d.proc.pid)

            before = monotonic_usec()
            d.signal(signal.SIGHUP)
            await notify.wait_for(lambda s: s == ["READY", "RELOADING", "READY"])
            reloading = [m for _, m in notify.snapshot() if m.get("RELOADING") == "1"][0]
            # MONOTONIC_USEC is CLOCK_MONOTONIC, the same clock systemd compares with.
            assert before <= int(reloading["MONOTONIC_USEC"]) <= monotonic_usec()

            d.signal(signal.SIGTERM)
            assert await d.wait() == 0
    assert notify.states() == ["READY", "RELOADING", "READY", "STOPPING"]
    assert all("STATUS" in m for _, m in notify.snapshot() if "WATCHDOG" not in m)


def test_watchdog_pings_come_from_the_event_loop(tmp_path: Path) -> None:
    """A loop that is blocked (a wedged daemon) sends no WATCHDOG=1; it resumes after."""
    listener = Notifications(tmp_path / "wd.sock")
    notifier = Notifier({"NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "200000"})
    assert notifier.watchdog_s == 0.2
    marks: dict[str, float] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(notifier.watchdog)
            await trio.sleep(0.5)
            marks["blocked"] = time.monotonic()
            time.sleep(0.8)  # the loop is wedged: no task runs
            marks["unblocked"] = time.monotonic()
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
        time.sleep(0.1)
        pings = [t for t, m in listener.snapshot() if m.get("WATCHDOG") == "1"]
    finally:
        listener.close()
        notifier.close()
    before = [t for t in pings if t < marks["blocked"]]
    during = [t for t in pings if marks["blocked"] + 0.05 < t < marks["unblocked"] - 0.05]
    after = [t for t in pings if t > marks["unblocked"]]
    assert len(before) >= 3 and during == [] and len(after) >= 2, (before, during, after)
    gaps = [b - a for a, b in zip(before, before[1:])]
    assert all(0.05 < g < 0.2 for g in gaps), gaps  # half of WATCHDOG_USEC


def test_watchdog_is_off_without_usec_or_for_another_pid() -> None:
    assert Notifier({"NOTIFY_SOCKET": "/x"}).watchdog_s is None
    assert Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_s is None
    assert Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}).watchdog_s == 1.0
    quiet = Notifier({})
    assert not quiet.enabled and quiet.send("READY=1") is False


async def test_the_daemon_pings_the_watchdog_and_stops_when_frozen(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], notify: Notifications
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    env = {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"}
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env=env) as d:
            await trio.sleep(1.0)
            d.signal(signal.SIGSTOP)  # the whole process wedged
            stopped = time.monotonic()
            await trio.sleep(1.0)
            resumed = time.monotonic()
            d.signal(signal.SIGCONT)
            await trio.sleep(0.7)
    pings = [t for t, m in notify.snapshot() if m.get("WATCHDOG") == "1"]
    assert len([t for t in pings if t < stopped]) >= 3
    assert [t for t in pings if stopped + 0.1 < t < resumed] == []
    assert len([t for t in pings if t > resumed]) >= 2


# -- socket activation ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _activated_session(tmp_path: Path, bridge_exe: list[str], clean_env: dict[str, str], wrapper: list[str],
                             port: int, acp_path: Path, pass_fds: tuple[int, ...] = ()) -> str:  # fmt: skip
    """Start the daemon through `wrapper`; an HTTP client and an ACP client are served
    on the passed sockets. Returns the daemon's log."""
    # The config points elsewhere: the daemon must use the sockets it was given.
    config = base_config(tmp_path, {"demo": demo_route()}, server={"listen": "127.0.0.1:1"},
                         daemon={"acp_socket": str(tmp_path / "not-this.sock")})  # fmt: skip
    answers: dict[str, bytes] = {}

    async def early_client() -> None:
        # Connects before the daemon runs (systemd-socket-activate starts it on this).
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                break
            except OSError:
                await trio.sleep(0.02)  # the wrapper has not bound it yet
        async with stream:
            await stream.send_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
        answers["early"] = data

    async with trio.open_nursery() as nursery:
        nursery.start_soon(early_client)
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, wrapper=wrapper, pass_fds=pass_fds) as d:
            assert d.url == f"http://127.0.0.1:{port}"
            assert d.acp_socket is not None
            status, body = await d.get("/readyz")
            assert status == 200, body
            async with d.acp("demo") as c:
                await c.init()
                sid = await c.new()
                done = await c.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]})
                assert done == {"stopReason": "end_turn"}
            d.signal(signal.SIGTERM)
            assert await d.wait() == 0
            log = d.log_text()
    assert b" 200 " in answers["early"].split(b"\r\n")[0] and b'"ok"' in answers["early"]
    assert not (tmp_path / "not-this.sock").exists()
    assert "socket activation" in log
    return log


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate is not installed")
async def test_socket_activation_through_systemd_socket_activate(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    port = _free_port()
    acp_path = tmp_path / "activated.sock"
    wrapper = ["systemd-socket-activate", "-l", f"127.0.0.1:{port}", "-l", str(acp_path), "--fdname=http:acp",
               "-E", "PATH", "-E", "HOME", "-E", "PYTHONPATH"]  # fmt: skip
    with trio.fail_after(40):
        log = await _activated_session(tmp_path, bridge_exe, clean_env, wrapper, port, acp_path)
    assert "(http, http)" in log and "(acp, acp)" in log


# Does what systemd does: the sockets as fds 3 and 4, LISTEN_PID set to the pid that execs.
_EXEC_WRAPPER = """
import fcntl, os, sys
fds = [fcntl.fcntl(int(x), fcntl.F_DUPFD, 10) for x in sys.argv[1:3]]  # out of the way of 3 and 4
for target, fd in zip((3, 4), fds):
    os.dup2(fd, target)  # inheritable
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="2", LISTEN_FDNAMES="web:editors")
os.execv(sys.argv[3], sys.argv[3:])
"""


async def test_socket_activation_by_hand_tells_sockets_apart_by_family(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    port = tcp.getsockname()[1]
    acp_path = tmp_path / "byhand.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(acp_path))
    unix.listen(16)
    wrapper = [sys.executable, "-c", _EXEC_WRAPPER, str(tcp.fileno()), str(unix.fileno())]
    try:
        with trio.fail_after(40):
            log = await _activated_session(tmp_path, bridge_exe, clean_env, wrapper, port, acp_path,
                                           pass_fds=(tcp.fileno(), unix.fileno()))  # fmt: skip
    finally:
        tcp.close()
        unix.close()
    # Names systemd does not know as ours ("web", "editors"): told apart by family.
    assert "(web, http)" in log and "(editors, acp)" in log


async def test_listen_fds_for_another_pid_are_ignored(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    env = {"LISTEN_PID": "1", "LISTEN_FDS": "2"}
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env=env) as d:
            assert d.acp_socket == str(tmp_path / "run" / "acp.sock")
            assert (await d.get("/healthz"))[0] == 200


# -- exit codes -----------------------------------------------------------------------------


async def test_a_config_error_exits_78(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[routes.demo]\nback = { kind = "demo" }\n[daemon]\nshutdown_grace_s = -1\n')
    proc = await trio.run_process([*bridge_exe, "serve", "--config", str(bad)], env=clean_env, capture_stderr=True, check=False)
    assert proc.returncode == 78
    assert b"$.daemon.shutdown_grace_s" in proc.stderr


async def test_a_socket_in_use_exits_71(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as first:
            path = tmp_path / "second.toml"
            path.write_text((tmp_path / "daemon.toml").read_text())
            proc = await trio.run_process(
                [*bridge_exe, "serve", "--config", str(path), "--state-dir", str(tmp_path / "state2")],
                env=clean_env, capture_stderr=True, capture_stdout=True, check=False,
            )  # fmt: skip
            assert proc.returncode == 71, proc.stderr
            assert b"another daemon is listening" in proc.stderr
            assert (await first.get("/healthz"))[0] == 200  # the first one is untouched


async def test_the_default_socket_held_by_another_daemon_is_only_a_warning(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {**clean_env, "XDG_RUNTIME_DIR": str(runtime)}
    config = base_config(tmp_path, {"demo": demo_route()}, daemon={"acp_socket": True})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, env, config, name="first") as first:
            assert first.acp_socket == str(runtime / "agent-bridge" / "acp.sock")
            async with start_daemon(bridge_exe, tmp_path, env, config, name="second", args=("--state-dir", str(tmp_path / "s2"))) as second:
                assert second.acp_socket is None  # serving, without the ACP socket
                assert (await second.get("/healthz"))[0] == 200
                assert "serving without it" in second.log_text()
            async with first.acp("demo") as c:  # the first daemon's socket is untouched
                await c.init()


async def test_a_stale_socket_file_is_replaced(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    stale = tmp_path / "run" / "acp.sock"
    stale.parent.mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # the file stays, nobody listens: a daemon that died
    config = base_config(tmp_path, {"demo": demo_route()})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            assert oct(os.stat(d.acp_socket).st_mode & 0o777) == "0o600"  # type: ignore[arg-type]
            async with d.acp(None) as c:  # null route: the only route
                await c.init()
            d.signal(signal.SIGTERM)
            assert await d.wait() == 0
    assert not stale.exists()  # removed at exit


# -- the unit files ---------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt-get install systemd)")
def test_unit_files_pass_systemd_analyze_verify(tmp_path: Path, bridge_exe: list[str]) -> None:
    units = tmp_path / "units"
    units.mkdir()
    service = (REPO / "systemd" / "agent-bridge.service").read_text()
    assert "/opt/agent-bridge/bin/agent-bridge" in service
    # verify checks that ExecStart= exists: point it at this checkout's executable.
    (units / "agent-bridge.service").write_text(service.replace("/opt/agent-bridge/bin/agent-bridge", bridge_exe[0]))
    shutil.copy(REPO / "systemd" / "agent-bridge.socket", units / "agent-bridge.socket")
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(units / "agent-bridge.socket"), str(units / "agent-bridge.service")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt-get install systemd)")
def test_the_template_unit_passes_systemd_analyze_verify_as_an_instance(tmp_path: Path, bridge_exe: list[str]) -> None:
    template = (REPO / "systemd" / "agent-bridge@.service").read_text()
    # An instance, so that verify expands %i as systemd will.
    unit = tmp_path / "agent-bridge@a.service"
    unit.write_text(template.replace("/opt/agent-bridge/bin/agent-bridge", bridge_exe[0]))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_the_template_unit_runs_one_instance_per_name() -> None:
    template = (REPO / "systemd" / "agent-bridge@.service").read_text()
    for line in [
        "ExecStart=/opt/agent-bridge/bin/agent-bridge serve --config /etc/agent-bridge/%i.toml",
        "StateDirectory=agent-bridge/%i", "RuntimeDirectory=agent-bridge/%i", "Type=notify", "WatchdogSec=",
        "RestartPreventExitStatus=78", "KillMode=mixed", "ExecReload=", "ProtectSystem=strict",
    ]:  # fmt: skip
        assert f"\n{line}" in template, line
    assert "%i is the instance's name" in template


def test_unit_files_say_what_the_issue_asks() -> None:
    service = (REPO / "systemd" / "agent-bridge.service").read_text()
    sock = (REPO / "systemd" / "agent-bridge.socket").read_text()
    for line in [
        "Type=notify", "WatchdogSec=", "DynamicUser=yes", "StateDirectory=agent-bridge", "RuntimeDirectory=agent-bridge",
        "ConfigurationDirectory=agent-bridge", "LoadCredential=", "ProtectSystem=strict", "ProtectHome=yes",
        "PrivateTmp=yes", "NoNewPrivileges=yes", "RestrictAddressFamilies=", "SystemCallFilter=@system-service",
        "RestartPreventExitStatus=78", "ExecReload=",
    ]:  # fmt: skip
        assert f"\n{line}" in service, line
    assert "ListenStream=/run/agent-bridge/acp.sock" in sock and "ListenStream=127.0.0.1:8765" in sock


def test_notifier_speaks_to_abstract_sockets() -> None:
    name = f"agent-bridge-test-{os.getpid()}"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind("\0" + name)
    receiver.settimeout(2)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(receiver.recv(4096)))
    t.start()
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        notifier.stopping("bye")
        t.join(3)
    finally:
        receiver.close()
    assert got == [b"STOPPING=1\nSTATUS=bye"]
