"""Is an ACP route's agent there? `doctor` (deep) and `/readyz` (shallow) through `AcpBack.probe`.

Shallow: the agent's command is found and executable, and the route's cwd exists.
Deep: the agent is spawned, `initialize`d (and `authenticate`d when the route says so:
ACP schema, `initialize` and `authenticate`), then ended.
"""

from __future__ import annotations

import os
import shutil

import trio

from bridge.backs.acp.config import AcpBackConfig
from bridge.backs.acp.process import AgentProcess
from bridge.backs.acp.setup import agent_env
from bridge.errors import BackUnavailable, BridgeError
from bridge.schema import acp

__all__ = ["probe_agent"]


async def probe_agent(route: str, cfg: AcpBackConfig, *, deep: bool) -> str:
    """What works, in words an operator can act on; raises a BridgeError saying what does not."""
    command = cfg.command[0]
    found = shutil.which(command)
    if found is None:
        raise BackUnavailable(f"command {command!r} not found or not executable")
    if cfg.cwd is not None and not os.path.isdir(cfg.cwd):
        raise BackUnavailable(f"cwd {cfg.cwd!r} is not a directory")
    if not deep:
        return f"command {found} found"
    proc = AgentProcess(
        route=route,
        cfg=cfg,
        argv=list(cfg.command),
        env=agent_env(route, cfg),
        cwd=cfg.cwd,
        client_caps=acp.ClientCapabilities(),
        owner="doctor",
    )
    failure: BridgeError | None = None
    async with trio.open_nursery() as nursery:
        try:
            init = await proc.start(nursery=nursery)
        except BridgeError as exc:  # raised out of the nursery, not wrapped in its group
            failure = exc
        finally:
            await proc.stop()
    if failure is not None:
        raise failure
    info = init.agent_info or {}
    who = " ".join(str(info[k]) for k in ("name", "version") if info.get(k)) or "the agent"
    return f"{who} initialized (ACP protocol version {init.protocol_version})"
