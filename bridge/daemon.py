"""Process-level wiring: open the store, run the session manager, serve fronts.

`run_acp_stdio` is what `agent-bridge acp ROUTE` runs (the route in-process, no
daemon needed), `run_mcp_stdio` what `agent-bridge mcp` runs. `open_runtime` is shared
by every entry point.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from bridge.backs import make_back
from bridge.cluster import Cluster, SoloCluster
from bridge.codecs import safejson
from bridge.config import Config
from bridge.fronts.chat.config import WsFrontConfig
from bridge.session import SessionManager
from bridge.store import Store, open_store

__all__ = [
    "build_app",
    "default_state_dir",
    "hyper_config",
    "open_runtime",
    "run_acp_stdio",
    "run_mcp_stdio",
    "serve",
]

log = logging.getLogger("bridge.daemon")


def default_state_dir() -> str:
    systemd = os.environ.get("STATE_DIRECTORY")  # StateDirectory= (systemd.exec(5)); may be a list
    if systemd:
        return systemd.split(":")[0]
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "agent-bridge")


def _cluster_for(config: Config, store: Store) -> Cluster:
    """The instances sharing `store`: PostgreSQL's (leases, forwarded commands, NOTIFY), or
    this process alone. The PostgreSQL side is imported only when it is used."""
    if config.store.postgres:
        from bridge.cluster.pg import PgCluster

        return PgCluster(store, config.cluster)
    return SoloCluster()


@contextlib.asynccontextmanager
async def open_runtime(config: Config, state_dir: str | None) -> AsyncIterator[SessionManager]:
    """A running SessionManager over an open store, one instance of its cluster (which
    the manager runs: bridge/session/manager.py); closes the sessions (their leases are
    released), then the cluster, then the store on exit."""
    safejson.configure(max_depth=config.server.max_json_depth)  # every decoder of this process
    store = open_store(config.store, state_dir, lease_ttl_s=config.cluster.lease_ttl_s)
    await store.open()
    try:
        manager = SessionManager(config, store, make_back, cluster=_cluster_for(config, store))
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            try:
                yield manager
            finally:
                with trio.move_on_after(10, shield=True):
                    await manager.close_all()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


async def run_acp_stdio(config: Config, route: str, state_dir: str | None, stdin_fd: int, stdout_fd: int) -> None:
    from bridge.fronts.acp.front import serve_acp

    receive = trio.lowlevel.FdStream(stdin_fd)
    send = trio.lowlevel.FdStream(stdout_fd)
    async with open_runtime(config, state_dir) as manager:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await serve_acp(receive, send, manager=manager, config=config, route=route)
            nursery.cancel_scope.cancel()


async def run_mcp_stdio(config: Config, state_dir: str | None, stdin_fd: int, stdout_fd: int) -> None:
    """The MCP front on stdio: every route's prompts, every route as a tool (bridge/fronts/mcp/front.py)."""
    from bridge.fronts.mcp.front import serve_mcp_stdio

    async with open_runtime(config, state_dir) as manager:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await serve_mcp_stdio(config, manager, stdin_fd, stdout_fd)
            nursery.cancel_scope.cancel()


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    """Editors end the agent they spawned with SIGTERM (or SIGHUP when they go away):
    stop as on EOF, so every session closes and no agent process outlives us."""
    import signal

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("%s: closing the sessions and stopping", signal.Signals(signum).name)
            scope.cancel()
            return


def build_app(config: Config, manager: SessionManager, *, readiness: Any = None, metrics: Any = None) -> object:
    """The ASGI app of every HTTP front (`readiness`: /readyz, `metrics`: /metrics)."""
    from bridge.fronts.http import HttpApp, send_json
    from bridge.fronts.http_policy import BrowserPolicy

    from bridge.fronts.auth import Authenticator

    # Host, Origin, Content-Type for every front; then the issuers' tokens, if any.
    app = HttpApp(BrowserPolicy(config.server), Authenticator(config.auth) if config.auth.issuers else None)
    if app.auth is not None:
        app.background(app.auth.run)  # each issuer's keys fetched once at start
    app.readiness = readiness  # routes' health for the fronts that show it (GET /api/routes)

    from bridge.workers import worker_index

    alive: dict[str, object] = {"status": "ok"}
    index = worker_index()
    if index is not None:  # which of `serve --workers N` answered (bridge/workers.py)
        alive["worker"] = index

    async def healthz(scope: object, receive: object, send: object, params: dict[str, str]) -> None:
        await send_json(send, 200, alive)  # type: ignore[arg-type]

    app.add("GET", "/healthz", healthz, public=True)  # type: ignore[arg-type]
    if readiness is not None or metrics is not None:
        from bridge.health import AdminToken, register
        from bridge.logs import add_secret

        server = config.server
        token = server.admin_token()
        add_secret(token)
        admin = AdminToken(token, configured=bool(server.admin_token_env or server.admin_token_file))
        register(app, readiness=readiness, metrics=metrics, admin=admin, metrics_need_token=server.metrics_need_token)

    from bridge.fronts import console

    console.register(app)  # the web console at `/`: static files calling the public APIs
    from bridge.fronts import api_docs

    api_docs.register(app)  # /api/openapi.json, /api/asyncapi.json: what the APIs are, no data
    # Every front on the listener, as its package declares (bridge/registry.py, FrontKind.register).
    for front in config.protocols.fronts.values():
        if front.register is not None:
            front.register(app, config, manager)
    if metrics is not None:
        from bridge.health import CountConnections

        return CountConnections(app, metrics)
    return app


def hyper_config(config: Config, binds: list[str]) -> Any:
    """hypercorn's settings for the daemon's HTTP listener on `binds`."""
    from hypercorn.config import Config as HyperConfig

    hc = HyperConfig()
    hc.bind = binds
    hc.graceful_timeout = config.server.graceful_timeout_s
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.h11_max_incomplete_size = 64 * 1024
    # Above [ws] max_frame_bytes so the chat front can answer an oversized frame itself.
    ws = config.section(WsFrontConfig)
    hc.websocket_max_message_size = max(config.server.max_body_bytes, ws.max_frame_bytes + 1)
    # The chat front pings by itself when it writes through hypercorn's stream (no task per
    # connection); hypercorn's own pings serve its per-message ASGI path.
    hc.websocket_ping_interval = None if ws.batch_writes else ws.ping_interval_s
    return hc


async def serve(
    config: Config,
    *,
    state_dir: str | None,
    config_path: str | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> int:
    """The daemon: every HTTP front on one hypercorn (trio worker) listener, the ACP
    front on a unix socket, under systemd or not (bridge/service.py).

    Reports the bound addresses through `task_status`; reloads `config_path` on
    SIGHUP; returns its exit status after SIGTERM/SIGINT (0 once running turns
    finished or were cancelled and everything closed). Raises `StartError` when a
    listener or the store cannot be opened.
    """
    from bridge.service import run_service

    return await run_service(
        config,
        state_dir=state_dir,
        config_path=config_path,
        open_runtime=open_runtime,
        build_app=build_app,
        hyper_config=hyper_config,
        task_status=task_status,
    )
