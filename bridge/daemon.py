"""Process-level wiring: open the store, run the session manager, serve fronts.

`run_acp_stdio` is what `agent-bridge acp ROUTE` runs (the route in-process, no
daemon needed). `open_runtime` is shared by every entry point.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from bridge.backs import make_back
from bridge.config import Config
from bridge.session import SessionManager
from bridge.store import Store, open_store

__all__ = ["build_app", "default_state_dir", "open_runtime", "run_acp_stdio", "serve"]

log = logging.getLogger("bridge.daemon")


def default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "agent-bridge")


@contextlib.asynccontextmanager
async def open_runtime(config: Config, state_dir: str | None) -> AsyncIterator[SessionManager]:
    """A running SessionManager over an open store; closes both on exit."""
    store: Store = open_store(state_dir)
    await store.open()
    try:
        manager = SessionManager(config, store, make_back)
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
    from bridge.fronts.acp import serve_acp

    receive = trio.lowlevel.FdStream(stdin_fd)
    send = trio.lowlevel.FdStream(stdout_fd)
    async with open_runtime(config, state_dir) as manager:
        await serve_acp(receive, send, manager=manager, config=config, route=route)


def build_app(config: Config, manager: SessionManager) -> object:
    """The ASGI app of every HTTP front."""
    from bridge.fronts.http import HttpApp, send_json

    app = HttpApp()

    async def healthz(scope: object, receive: object, send: object, params: dict[str, str]) -> None:
        await send_json(send, 200, {"status": "ok"})  # type: ignore[arg-type]

    app.add("GET", "/healthz", healthz)  # type: ignore[arg-type]
    return app


async def serve(
    config: Config,
    *,
    state_dir: str | None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The daemon: every HTTP front on one hypercorn (trio worker) listener.

    Reports the bound addresses through `task_status`; returns after SIGINT/SIGTERM
    once open requests finished within `server.graceful_timeout_s`.
    """
    import signal

    from hypercorn.config import Config as HyperConfig
    from hypercorn.trio import serve as hyper_serve

    from bridge.config import listen_address

    host, port = listen_address(config.server)
    hc = HyperConfig()
    hc.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    hc.graceful_timeout = config.server.graceful_timeout_s
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.h11_max_incomplete_size = 64 * 1024
    hc.websocket_max_message_size = config.server.max_body_bytes

    stop = trio.Event()

    async def on_signals() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                stop.set()
                return

    async with open_runtime(config, state_dir) as manager:
        app = build_app(config, manager)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            bound = await nursery.start(
                lambda task_status: hyper_serve(app, hc, shutdown_trigger=stop.wait, task_status=task_status)  # type: ignore[arg-type]
            )
            log.info("listening on %s", ", ".join(bound))
            task_status.started(bound)
            await stop.wait()
            # hypercorn returns once open requests finished (bounded by graceful_timeout)
