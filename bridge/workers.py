"""`agent-bridge serve --workers N`: N daemon processes on one machine behind one listener.

One trio event loop runs on one core (issue 17: one process saturates at about ten
concurrent clients while the other cores idle). With `--workers N` the process that
was started becomes a supervisor: it binds every listening socket once (the HTTP
listener of `[server] listen` and the ACP unix socket, or takes them from systemd),
then starts N workers, each an ordinary `agent-bridge serve` that receives those
sockets the way systemd passes them (`LISTEN_FDS`/`LISTEN_PID`, sd_listen_fds(3);
bridge/systemd.py), so inherited sockets have one code path whoever passes them.

Why one shared socket rather than a socket per worker with `SO_REUSEPORT`: the
kernel hashes each connection to one socket of a `SO_REUSEPORT` group, so while a
worker restarts, the connections hashed to its socket wait in its backlog; with one
shared socket every worker accepts from the same queue and the others take them all.
It also keeps port 0 meaning one port, and is what systemd's socket units hand over.

The workers share one PostgreSQL store: a session's live turn runs on the worker
holding its lease and the others forward to it (bridge/cluster/). Separate processes
owning one SQLite file cannot reach each other, so `--workers` > 1 needs `[store] url`.

The supervisor forwards SIGTERM, SIGINT and SIGHUP to every worker (each stops or
reloads as a lone daemon does, bridge/service.py; SIGHUP once the worker listens: a
worker still starting has no handler for it yet, so it gets it when it does), waits for them to exit (bounded:
past the workers' own stop bound they are killed), restarts a worker that exits
unexpectedly (after a delay doubling from `RESTART_DELAY_S` to `MAX_RESTART_DELAY_S`),
and gives up, stopping the others and exiting `EX_SOFTWARE`, when one exits more than
`MAX_RESTARTS` times in `RESTART_WINDOW_S`. A worker that exits before it ever listened
(a configuration or store it cannot use) stops everything with its exit status: the
next one would fail the same way. Workers run in their own process group (a terminal's
Ctrl-C reaches them once, through the supervisor) and stop gracefully if the supervisor
dies (each watches its parent). Each worker's log lines carry `worker=I`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from bridge.fronts.console import console_url
from bridge.systemd import Notifier

__all__ = [
    "EX_SOFTWARE",
    "MAX_RESTARTS",
    "RESTART_WINDOW_S",
    "WORKER_ENV",
    "Listener",
    "Supervisor",
    "bind_listeners",
    "run_workers",
    "supervise",
    "watch_supervisor",
    "worker_index",
]

log = logging.getLogger("bridge.workers")

EX_SOFTWARE = 70  # sysexits.h: the workers keep dying
WORKER_ENV = "AGENT_BRIDGE_WORKER"  # a worker's index (1..N), for its logs and /healthz
RESTART_DELAY_S = 0.5
MAX_RESTART_DELAY_S = 10.0
MAX_RESTARTS = 5  # per worker, in RESTART_WINDOW_S: more and the supervisor gives up
RESTART_WINDOW_S = 60.0

# Run by the worker's own interpreter between fork and the daemon's exec: the sockets
# go to descriptors 3, 4, ... and LISTEN_PID names the process that execs, as systemd
# does (sd_listen_fds(3)). No PR_SET_PDEATHSIG: the kernel sends it when the *thread*
# that forked exits, and trio forks in a worker thread that ends when idle (the
# workers were stopped 10 s after they started); the worker watches its parent
# instead (`watch_supervisor`).
_TRAMPOLINE = """
import fcntl, os, sys
ppid, fds, argv = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",") if x], sys.argv[3:]
if os.getppid() != ppid:
    sys.exit(0)
moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 3 + len(fds)) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(moved):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=str(len(fds)))
os.execv(argv[0], argv)
"""


async def watch_supervisor(interval_s: float = 1.0) -> None:
    """In a worker: once the supervisor that started it is gone (the worker was handed to
    another parent), stop as on SIGTERM, gracefully, so no worker outlives its service."""
    parent = os.getppid()
    while os.getppid() == parent:
        await trio.sleep(interval_s)
    log.warning("the supervisor (pid %d) is gone: stopping", parent)
    os.kill(os.getpid(), signal.SIGTERM)


def worker_index() -> int | None:
    """This process's index among the supervisor's workers; None when it is not one."""
    value = os.environ.get(WORKER_ENV, "")
    return int(value) if value.isdigit() else None


@dataclass
class Listener:
    """A socket every worker serves on: its name for `$LISTEN_FDNAMES` ("http", "acp")
    and how it is printed in the `listening` line."""

    sock: socket.socket
    name: str
    shown: str


@dataclass
class _Worker:
    index: int
    proc: trio.Process | None = None
    ready: bool = False  # its current process listens
    hup: bool = False  # a SIGHUP came while its current process was starting: sent once it listens
    listened: bool = False  # one of its processes did
    exits: deque[float] = field(default_factory=deque)  # when it exited unexpectedly (trio clock)


class Supervisor:
    """Starts `count` workers running `command` on `listeners`; see the module docstring."""

    def __init__(
        self,
        command: Sequence[str],
        listeners: Sequence[Listener],
        count: int,
        *,
        stop_timeout_s: float,
        notifier: Notifier | None = None,
        env: dict[str, str] | None = None,
        restart_delay_s: float = RESTART_DELAY_S,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self.command = list(command)
        self.restart_delay_s = restart_delay_s
        self.max_restarts = max_restarts
        self.listeners = list(listeners)
        self.workers = [_Worker(i + 1) for i in range(count)]
        self.stop_timeout_s = stop_timeout_s
        self.notifier = notifier or Notifier({})
        self.env = dict(os.environ if env is None else env)
        self.stopping = False
        self.forced: int | None = None  # the signal that stopped everything at once
        self.stop_signal: int | None = None  # the signal a graceful stop sent the workers
        self.status: int | None = None  # set when the supervisor gives up
        self.all_ready = trio.Event()  # every worker listened once
        self._changed = trio.Event()

    # -- signals ------------------------------------------------------------------------------
    def signal_all(self, signum: int) -> None:
        """`signum` to every worker running; SIGHUP only to those that listen (before, its
        default action would kill a worker still starting): the others get it once they do."""
        for worker in self.workers:
            if worker.proc is not None and worker.proc.returncode is None:
                if signum == signal.SIGHUP and not worker.ready:
                    worker.hup = True
                    continue
                try:
                    worker.proc.send_signal(signum)
                except ProcessLookupError:
                    pass

    def on_signal(self, signum: int) -> None:
        """SIGHUP: every worker reloads. SIGTERM/SIGINT: they stop gracefully; a second
        one: they stop at once."""
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            log.info("SIGHUP: each worker reloads its configuration")
        elif not self.stopping:
            log.info("%s: stopping the %d workers gracefully (a second signal stops them at once)", name, len(self.workers))
            self.stop_signal = signum
            self._stop()
        else:
            log.warning("%s again: the workers stop now", name)
            self.forced = signum
        self.signal_all(signum)

    def give_up(self, status: int) -> None:
        """Stop every worker (SIGTERM) and exit with `status`."""
        if self.status is None:
            self.status = status
        if not self.stopping:
            self.stop_signal = signal.SIGTERM
        self._stop()
        self.signal_all(signal.SIGTERM)

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self.notifier.stopping(f"stopping {len(self.workers)} workers")
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- running ------------------------------------------------------------------------------
    async def run(self) -> int:
        """Until every worker has exited after a stop; returns the exit status."""
        async with trio.open_nursery() as nursery:
            for worker in self.workers:
                nursery.start_soon(self._keep, worker)
            while not self.stopping and not all(w.ready for w in self.workers):
                await self._changed.wait()
            if not self.stopping:
                self.all_ready.set()
                log.info("%d workers listening", len(self.workers))
                self.notifier.ready(f"{len(self.workers)} workers")
            while not self.stopping:
                await self._changed.wait()
            with trio.move_on_after(self.stop_timeout_s) as waited:
                while any(w.proc is not None and w.proc.returncode is None for w in self.workers):
                    await self._changed.wait()
            if waited.cancelled_caught:
                log.warning("workers still running %g s after the stop: killed", self.stop_timeout_s)
                self.signal_all(signal.SIGKILL)
            nursery.cancel_scope.cancel()
        if self.status is not None:
            return self.status
        if self.forced is not None:
            return 128 + self.forced
        codes = [self._status_of(w.proc.returncode) for w in self.workers if w.proc is not None and w.proc.returncode]
        return next((code for code in codes if code), 0)

    def _status_of(self, returncode: int) -> int:
        """A worker's exit as a process exit status: killed by a signal is 128 + its
        number (as a shell says it), but 0 for the signal of our own graceful stop (a
        worker still starting has no handler for it yet: its default action ends it)."""
        if returncode >= 0:
            return returncode
        return 0 if -returncode == self.stop_signal else 128 - returncode

    async def _keep(self, worker: _Worker) -> None:
        """Run `worker`, and again after each unexpected exit, until the stop."""
        delay = self.restart_delay_s
        while not self.stopping:
            status = await self._run_once(worker)
            if self.stopping:
                return
            # Ended by a SIGHUP before it could handle it (someone else's: ours wait until it
            # listens): no crash, nor a sign that the next one fails the same way.
            crashed = status != -signal.SIGHUP
            if crashed and not worker.listened:
                log.error("worker %d exited before it listened: stopping", worker.index)
                self.give_up(status if status > 0 else EX_SOFTWARE)
                return
            now = trio.current_time()
            if crashed:
                worker.exits.append(now)
            while worker.exits and now - worker.exits[0] > RESTART_WINDOW_S:
                worker.exits.popleft()
            if len(worker.exits) > self.max_restarts:
                log.error("worker %d exited %d times in %g s: stopping", worker.index, len(worker.exits), RESTART_WINDOW_S)
                self.give_up(EX_SOFTWARE)
                return
            log.warning("worker %d restarts in %g s", worker.index, delay)
            with trio.move_on_after(delay):
                while not self.stopping:
                    await self._changed.wait()
            delay = min(delay * 2, MAX_RESTART_DELAY_S) if crashed else delay

    async def _run_once(self, worker: _Worker) -> int:
        fds = [listener.sock.fileno() for listener in self.listeners]
        env = {
            **self.env,
            WORKER_ENV: str(worker.index),
            "LISTEN_FDNAMES": ":".join(listener.name for listener in self.listeners),
        }
        argv = [sys.executable, "-S", "-c", _TRAMPOLINE, str(os.getpid()), ",".join(map(str, fds)), *self.command]
        # Its own process group: a terminal's Ctrl-C reaches it once, from us.
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env, pass_fds=fds, process_group=0)
        worker.proc, worker.hup = proc, False
        log.info("worker %d started (pid %d)", worker.index, proc.pid)
        if self.stopping:  # the stop came while it was starting
            proc.send_signal(signal.SIGTERM)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stdout, worker, proc)
                await proc.wait()
                nursery.cancel_scope.cancel()
        finally:
            worker.ready = False
            self._wake()
        status = proc.returncode
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        (log.info if self.stopping and status == 0 else log.warning)("worker %d (pid %d) %s", worker.index, proc.pid, how)
        return status

    async def _read_stdout(self, worker: _Worker, proc: trio.Process) -> None:
        """The worker's `listening ...` line says it serves; what follows is read and dropped."""
        assert proc.stdout is not None
        buf = b""
        async with proc.stdout:
            while chunk := await proc.stdout.receive_some(4096):
                if worker.ready:
                    continue
                buf = (buf + chunk)[-65536:]
                if b"\n" in buf:
                    worker.ready = worker.listened = True
                    log.info("worker %d (pid %d) %s", worker.index, proc.pid, buf.split(b"\n")[0].decode(errors="replace"))
                    if worker.hup:  # the SIGHUP that came while it was starting
                        worker.hup = False
                        with contextlib.suppress(ProcessLookupError):
                            proc.send_signal(signal.SIGHUP)
                    self._wake()


def bind_listeners(config: Any, activated: Sequence[Any]) -> tuple[list[Listener], Any]:
    """The sockets the workers share: systemd's when it passed any, else bound here from
    `[server] listen` and `[daemon] acp_socket`. Returns them and a `release()` to call
    at the end (it removes the ACP socket file bound here)."""
    from bridge.config import listen_address
    from bridge.service import acp_listener, release_acp_socket

    listeners: list[Listener] = []
    http = [a for a in activated if a.kind == "http"]
    for a in http:
        sock = socket.socket(fileno=a.fd)
        if not a.listening:
            sock.listen(1024)
        listeners.append(Listener(sock, "http", _shown(sock)))
    if not http:
        host, port = listen_address(config.server)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
        listeners.append(Listener(sock, "http", _shown(sock)))
    acp_sock, acp_path, lock = acp_listener(config, list(activated))
    if acp_sock is not None:
        listeners.append(Listener(acp_sock, "acp", f"unix:{acp_path}"))

    def release() -> None:
        for listener in listeners:
            listener.sock.close()
        release_acp_socket(acp_path, lock)

    return listeners, release


def _shown(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def supervise(config: Any, command: Sequence[str], count: int, **policy: Any) -> int:
    """`serve --workers N`: bind, run the workers until a signal stops them; the exit status.
    The `listening ...` line is printed on stdout once every worker listens. `policy`:
    `Supervisor`'s restart settings."""
    from bridge.service import EX_OSERR, StartError
    from bridge.systemd import listen_fds

    notifier = Notifier()  # takes $NOTIFY_SOCKET from our environment: workers never notify
    activated = listen_fds()
    try:
        listeners, release = bind_listeners(config, activated)
    except StartError as exc:
        log.error("%s", exc.message)
        return exc.status
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            from bridge.service import address_in_use

            log.error("%s", address_in_use(config.server.listen))
        else:
            log.error("cannot start: %s", exc.strerror or exc)
        return EX_OSERR
    routes = config.routes.values()
    # What one worker's stop may take (bridge/service.py), with room for closing sessions.
    stop_timeout_s = (
        config.daemon.shutdown_grace_s + max((r.cancel_grace_s for r in routes), default=5.0) + config.server.graceful_timeout_s + 15
    )
    supervisor = Supervisor(command, listeners, count, stop_timeout_s=stop_timeout_s, notifier=notifier, **policy)

    async def relay(signals: Any) -> None:
        async for signum in signals:
            supervisor.on_signal(signum)

    async def announce() -> None:
        await supervisor.all_ready.wait()
        shown = [listener.shown for listener in listeners]
        console = console_url(shown)
        # One write, newline included: with PYTHONUNBUFFERED, print() writes its `end` apart,
        # and a reader may see the console line before its newline.
        print(f"listening {' '.join(shown)}" + (f"\nconsole: {console}" if console else "") + "\n", end="", flush=True)

    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay, signals)
                nursery.start_soon(announce)
                nursery.start_soon(notifier.watchdog)
                status = await supervisor.run()
                nursery.cancel_scope.cancel()
    finally:
        release()
        notifier.close()
    log.info("stopped (status %d)", status)
    return status


def run_workers(config: Any, options: dict[str, str | None], count: int) -> int:
    """`serve --workers N` from the CLI: each worker is `serve` with the same `options`."""
    command = [sys.executable, "-m", "bridge", "serve"]
    for option, value in options.items():
        if value is not None:
            command += [option, value]
    return trio.run(supervise, config, command, count)
