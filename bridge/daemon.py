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

__all__ = ["default_state_dir", "open_runtime", "run_acp_stdio"]

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
