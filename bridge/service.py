"""`agent-bridge serve` as a service: listeners, systemd, signals, reload and shutdown.

Start: systemd's sockets are taken if it passed any (the HTTP listener and the ACP
unix socket, told apart by `FileDescriptorName=` "http"/"acp", else by family), the
others are bound from the config; the store is opened; then `READY=1`. The watchdog
pings from this loop, `STATUS=` follows what runs.

SIGHUP: `RELOADING=1`, bridge/reload.py, `READY=1` (the old configuration stays on
any error). SIGTERM or SIGINT, the graceful stop: `STOPPING=1`; stop accepting (the
ACP socket's accept loop ends, hypercorn stops accepting and closes idle
keep-alive connections; new sessions and turns are refused); running turns get
`[daemon] shutdown_grace_s` to finish, then are cancelled through the session, so
each front says it its own way (ACP `cancelled`, chat `interrupted`, A2A
`CANCELED`); ACP socket connections end as at an editor's EOF once their answers are
written, chat WebSockets close with 1001 once their runs' ends are sent (bridge/fronts/chat/ws.py),
queued A2A push notifications are delivered, and other HTTP connections get
`[server] graceful_timeout_s` (one deadline for all of it); then the sessions close
(their agent processes end) and the store is flushed and closed. A second signal
stops at once: sessions are cancelled (their processes still end), nothing waits.

The stop is bounded whatever clients do: a connection still open at that deadline
(a client that stopped reading, so hypercorn's shielded socket write never returns;
an SSE reader that never reads; a slowloris request) is shut down at the socket, so
the daemon exits within `shutdown_grace_s` + the longest `cancel_grace_s` +
`graceful_timeout_s` + a few seconds of closing sessions and the store.

Exit status (sysexits.h): 0 after a graceful stop, 128+N after a forced one (signal
N), and `StartError.status` when a listener or the store cannot be opened (71,
EX_OSERR); a configuration error is found before this runs (78, in bridge/cli.py).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import socket
import stat
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from bridge.config import Config, listen_address
from bridge.errors import BridgeError, ConfigError
from bridge.session import SessionManager
from bridge.systemd import ActivatedSocket, Notifier, listen_fds

__all__ = ["EX_OSERR", "StartError", "acp_listener", "address_in_use", "release_acp_socket", "run_service"]

log = logging.getLogger("bridge.daemon")

EX_OSERR = 71


EX_SOFTWARE = 70  # sysexits.h: an internal error (a front that fails to register)
EX_CONFIG = 78  # the store is of a newer schema than this release


def address_in_use(address: str) -> str:
    """What to say when the HTTP listener's address is taken (EADDRINUSE): which one, and
    the three ways to choose another (the exit status stays EX_OSERR)."""
    return (
        f"cannot start: {address} is already in use (another agent-bridge, or another program, listens there); "
        "choose another address with `agent-bridge serve --listen HOST:PORT`, AGENT_BRIDGE_LISTEN=HOST:PORT "
        "or `listen` in the config's [server] table (port 0: any free port)"
    )


class StartError(Exception):
    """The daemon could not start: a listener or the store could not be opened."""

    def __init__(self, message: str, status: int = EX_OSERR) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


E = TypeVar("E", bound=BaseException)


def _leaf(exc: BaseException, kind: type[E]) -> E | None:
    """The first `kind` in `exc` or the groups it is wrapped in (nurseries wrap it)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _leaf(inner, kind)
            if found is not None:
                return found
    return None


def release_acp_socket(path: str | None, lock: int | None) -> None:
    """Remove the ACP socket file we bound (`acp_listener` gave its lock), then unlock it."""
    if lock is not None and path is not None:
        try:
            os.unlink(path)  # ours: we hold its lock
        except OSError:
            pass
        os.close(lock)


def acp_listener(config: Config, activated: list[ActivatedSocket]) -> tuple[socket.socket | None, str | None, int | None]:
    """(listening socket, its path, the lock we hold on it if we bound it ourselves).

    A path named in the config that cannot be used stops the start; the default path
    (another daemon of this user may hold it) is only warned about: the daemon then
    serves without an ACP socket."""
    from bridge.fronts.acp.unix_socket import bind_unix
    from bridge.shim import default_socket_path

    mine = [a for a in activated if a.kind == "acp"]
    if mine:
        if len(mine) > 1:
            log.warning("socket activation: %d ACP sockets passed; using the first", len(mine))
        sock = socket.socket(fileno=mine[0].fd)
        if not mine[0].listening:
            sock.listen(128)
        return sock, str(sock.getsockname()) or "(activated)", None
    want = config.daemon.acp_socket
    if want is False:
        return None, None, None
    path = want if isinstance(want, str) else default_socket_path()
    try:
        sock, lock = bind_unix(path, int(config.daemon.acp_socket_mode, 8))
    except OSError as exc:
        why = f"cannot listen on the ACP socket {path}: {exc.strerror or exc}"
        if isinstance(want, str):
            raise StartError(why) from exc
        log.warning("%s; serving without it (set [daemon] acp_socket to a path of this daemon's own)", why)
        return None, None, None
    return sock, path, lock


def _binds(config: Config, activated: list[ActivatedSocket]) -> list[str]:
    """hypercorn binds: systemd's HTTP sockets (`fd://N`) if it passed any, else `[server] listen`."""
    http = [a for a in activated if a.kind == "http"]
    if http:
        return [f"fd://{a.fd}" for a in http]
    host, port = listen_address(config.server)
    return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]


class _Status:
    """`STATUS=` for systemctl status: what runs, sent when it changes."""

    def __init__(self, notifier: Notifier, manager: SessionManager, acp_front: Any, listening: list[str]) -> None:
        self.notifier = notifier
        self.manager = manager
        self.acp_front = acp_front
        self.listening = listening
        self._last = ""

    def line(self) -> str:
        counts = self.manager.live_counts()
        sessions = sum(n for n, _ in counts.values())
        turns = sum(t for _, t in counts.values())
        acp = len(self.acp_front.streams) if self.acp_front is not None else 0
        return (
            f"{len(self.manager.config.routes)} routes, {sessions} sessions, {turns} turns running, "
            f"{acp} ACP connections; listening on {' '.join(self.listening)}"
        )

    async def run(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            line = self.line()
            if line != self._last:
                self._last = line
                self.notifier.status(line)


async def run_service(
    config: Config,
    *,
    state_dir: str | None,
    config_path: str | None,
    open_runtime: Callable[..., Any],
    build_app: Callable[..., Any],
    hyper_config: Callable[..., Any],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> int:
    from bridge.reload import import_credentials, register_secrets

    svc = _Service(config, config_path)
    import_credentials(config)
    register_secrets(config)
    binds = _binds(config, svc.activated)
    hc = hyper_config(config, binds)
    acp_sock, acp_path, lock = acp_listener(config, svc.activated)
    try:
        # Signals are ours from here to the end, cleanup included: a signal during the
        # final close must not kill the process half-way (default action).
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async with trio.open_nursery() as outer:
                outer.start_soon(svc.on_signals, signals)
                async with open_runtime(config, state_dir) as manager:
                    await svc.run(manager, hc, acp_sock, acp_path, build_app, task_status=task_status)
                    log.info("closing sessions and the store")
                outer.cancel_scope.cancel()
    except (OSError, BaseExceptionGroup) as exc:
        failed = None if svc.started else _leaf(exc, StartError)
        if failed is not None:
            raise failed from None  # already logged where it happened
        err = None if svc.started else _leaf(exc, OSError)
        if err is not None and err.errno == errno.EADDRINUSE:
            raise StartError(address_in_use(" ".join(binds))) from exc
        if err is not None:
            raise StartError(f"cannot start: {err.strerror or err}") from exc
        # The store could not be opened (busy, not a database, a migration that failed
        # and left the file as it was, or a newer schema: a configuration error).
        unopened = None if svc.started else _leaf(exc, BridgeError)
        if unopened is None:
            raise
        raise StartError(f"cannot start: {unopened.message}", EX_CONFIG if isinstance(unopened, ConfigError) else EX_OSERR) from exc
    finally:
        svc.notifier.close()
        release_acp_socket(acp_path, lock)
    if svc.forced:
        return 128 + svc.forced[0]
    log.info("stopped")
    return 0


class _Service:
    def __init__(self, config: Config, config_path: str | None) -> None:
        self.config = config
        self.config_path = config_path
        self.notifier = Notifier()
        self.activated = listen_fds()
        if self.activated:
            log.info("socket activation: %s", ", ".join(f"fd {a.fd} ({a.name}, {a.kind})" for a in self.activated))
        self.metrics: Any = None
        if config.daemon.metrics:
            from bridge.metrics import Metrics

            self.metrics = Metrics(fronts=config.protocols.fronts.values())
        self.stop = trio.Event()
        self.forced: list[int] = []
        self.started = False
        self.manager: SessionManager | None = None
        self.status: _Status | None = None
        self.nursery: trio.Nursery | None = None  # the serving nursery (reload tasks run there)

    async def on_signals(self, signals: Any) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                await self.reload()
            elif not self.stop.is_set():
                log.info("%s: stopping gracefully (a second signal stops at once)", name)
                self.stop.set()
            else:
                log.warning("%s again: stopping now", name)
                self.forced.append(signum)
                if self.manager is not None:
                    self.manager.abort()
                if self.nursery is not None:
                    self.nursery.cancel_scope.cancel()

    async def reload(self) -> None:
        from bridge.reload import apply_reload

        if self.stop.is_set() or self.manager is None or self.nursery is None or self.status is None:
            log.info("SIGHUP ignored: not serving")
            return
        log.info("SIGHUP: reloading %s", self.config_path or "the built-in configuration")
        self.notifier.reloading()
        ok, summary = await apply_reload(self.manager, self.config_path, nursery=self.nursery)
        if self.metrics is not None:
            self.metrics.reloaded(ok)
        self.notifier.ready(self.status.line() if ok else summary)

    async def run(
        self,
        manager: SessionManager,
        hc: Any,
        acp_sock: socket.socket | None,
        acp_path: str | None,
        build_app: Callable[..., Any],
        *,
        task_status: trio.TaskStatus[list[str]],
    ) -> None:
        from bridge.doctor import Readiness
        from bridge.fronts.acp.unix_socket import AcpSocketFront
        from bridge.fronts.http_guard import serve as hyper_serve  # one connection's fault ends only it

        metrics = self.metrics
        manager.observer = metrics
        if metrics is not None:
            metrics.live = manager.live_counts
            metrics.cluster = manager.cluster.stats
        readiness = Readiness(manager)
        readiness.store_ready = True
        try:
            app = build_app(self.config, manager, readiness=readiness, metrics=metrics)
        except Exception as exc:  # a front's `register` (a plugin's too) failed: nothing is listening yet
            log.exception("a front could not register its routes")
            raise StartError(f"a front could not register its routes: {exc!r}", EX_SOFTWARE) from exc
        acp_front = AcpSocketFront(manager, metrics=metrics) if acp_sock is not None else None
        status = _Status(self.notifier, manager, acp_front, [])
        http_stop, http_done, http_scope = trio.Event(), trio.Event(), trio.CancelScope()

        async def run_http(task_status: trio.TaskStatus[list[str]]) -> None:
            try:
                with http_scope:
                    await hyper_serve(app, hc, shutdown_trigger=http_stop.wait, task_status=task_status)
            finally:
                http_done.set()

        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            if self.forced:
                nursery.cancel_scope.cancel()  # a second signal came while starting
            bound: list[str] = await nursery.start(run_http)
            if acp_front is not None:
                await nursery.start(acp_front.serve, acp_sock)
                bound.append(f"unix:{acp_path}")
            readiness.listeners_ready = True
            status.listening = bound
            self.manager, self.status = manager, status
            log.info("listening on %s", ", ".join(bound))
            self.notifier.ready(status.line())
            self.started = True
            task_status.started(bound)
            nursery.start_soon(self.notifier.watchdog)
            nursery.start_soon(status.run, 5.0)
            retention_days = self.config.store.retention_days
            if retention_days is not None:  # old sessions deleted, never one the daemon holds live
                from bridge.store.retention import prune_on_schedule

                nursery.start_soon(functools.partial(
                    prune_on_schedule, manager.store, retention_days * 86400, keep=manager.hold_from_prune,
                    release=manager.release_pruned,
                ))  # fmt: skip
            await self.stop.wait()
            await _stop_gracefully(self.config, manager, self.notifier, acp_front, hc, http_stop, http_done)
            if not http_done.is_set():
                # Writes hypercorn shields (its `protocol_send`) cannot be cancelled:
                # a client that does not read would hold the process. Cut them off.
                cut = _cut_connections(_ports(bound))
                log.warning("%d HTTP connection(s) still open at the stop's deadline: cut off", cut)
            http_scope.cancel()
            nursery.cancel_scope.cancel()


async def _stop_gracefully(
    config: Config,
    manager: SessionManager,
    notifier: Notifier,
    acp_front: Any,
    hc: Any,
    http_stop: trio.Event,
    http_done: trio.Event,
) -> None:
    counts = manager.live_counts()
    running = sum(t for _, t in counts.values())
    grace = config.daemon.shutdown_grace_s
    notifier.stopping(f"stopping: {running} turns running get {grace:g} s to finish")
    manager.stop_accepting("the bridge is shutting down")
    if acp_front is not None:
        acp_front.stop_accepting()
    # hypercorn stops accepting now; its own deadline for open connections stays behind ours.
    cancel_grace = max((r.cancel_grace_s for r in manager.config.routes.values()), default=5.0)
    hc.graceful_timeout = grace + cancel_grace + config.server.graceful_timeout_s + 10
    http_stop.set()
    cancelled = await manager.drain(grace)
    manager.drained.set()
    if cancelled:
        log.info("%d turn(s) still running after %g s were cancelled", cancelled, grace)
    notifier.status("stopping: closing connections")
    # One deadline for everything that is left, whatever the clients do.
    deadline = trio.current_time() + config.server.graceful_timeout_s
    async with trio.open_nursery() as nursery:
        if acp_front is not None:
            nursery.start_soon(acp_front.finish, min(3.0, config.server.graceful_timeout_s))
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as finishing:  # what fronts still deliver (A2A webhooks)
                for finish in manager.before_close:
                    finishing.start_soon(finish)
    with trio.move_on_at(deadline):
        await http_done.wait()


def _ports(bound: list[str]) -> set[int]:
    """The TCP ports of the HTTP listener, from hypercorn's "http://HOST:PORT" binds."""
    ports = set()
    for address in bound:
        if address.startswith(("http://", "https://")):
            port = address.rsplit(":", 1)[-1]
            if port.isdigit():
                ports.add(int(port))
    return ports


def _cut_connections(ports: set[int]) -> int:
    """Shut down (both ways) every accepted TCP connection of ours on `ports`.

    hypercorn keeps no list of them that we can reach, so they are found among the
    process's descriptors: connected stream sockets whose local port is one of ours
    (an outgoing connection never has a listener's port as its local one). `shutdown`
    acts on the socket, not the descriptor: a write blocked on it fails at once (EPIPE)
    and its read sees the end, so hypercorn's tasks end on their own."""
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        fds = [int(name) for name in os.listdir(fd_dir) if name.isdigit()]
    except OSError as exc:
        log.warning("cannot list open connections to cut them off: %s", exc)
        return 0
    cut = 0
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue  # closed meanwhile, or not ours to read
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            if sock.getsockname()[1] not in ports:
                continue
            sock.getpeername()  # OSError (ENOTCONN) for the listening socket itself
            sock.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            continue
        finally:
            sock.close()  # the duplicate only
    return cut
