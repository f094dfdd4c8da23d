"""Is each route's back reachable? For `agent-bridge doctor` and the daemon's `/readyz`.

A probe tries a back once and says what it found, in words an operator can act on:

| back | shallow (`/readyz`, cached) | deep (`doctor`) |
|---|---|---|
| demo | built in: always ok | same |
| a2a | the agent card is fetched (the back's own card cache) | same |
| acp | the agent's command is found and executable | the agent is spawned, `initialize`d (and `authenticate`d), then ended |
| other kinds | "not checked" | "not checked" |

A back may carry its own `async def probe(*, deep: bool) -> str` (a description of
what works, or a `BackError` saying what does not); it is used before these.
MCP prompt sources are not part of the configuration yet: nothing to check.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

import trio

from bridge.backs import make_back
from bridge.config import Config, Route
from bridge.errors import BridgeError

__all__ = ["Probe", "Readiness", "probe_back", "probe_routes", "render_table"]

log = logging.getLogger("bridge.doctor")


@dataclass(frozen=True)
class Probe:
    route: str
    kind: str
    ok: bool | None  # None: not checked
    detail: str

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("not checked" if self.ok is None else "FAILED")

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "status": self.status, "detail": self.detail}


async def probe_back(name: str, route: Route, back: Any, *, deep: bool, timeout_s: float) -> Probe:
    kind = route.back.__struct_config__.tag
    try:
        with trio.fail_after(timeout_s):
            own = getattr(back, "probe", None)
            if own is not None:
                return Probe(name, str(kind), True, await own(deep=deep))
            if kind == "demo":
                return Probe(name, "demo", True, "built-in scripted agent")
            if kind == "a2a":
                return Probe(name, "a2a", True, await _a2a(back))
            if kind == "acp":
                return Probe(name, "acp", True, await _acp(name, route, deep=deep))
            return Probe(name, str(kind), None, f"no check for back kind {kind!r} yet")
    except trio.TooSlowError:
        return Probe(name, str(kind), False, f"no answer within {timeout_s:g} s")
    except BridgeError as exc:
        return Probe(name, str(kind), False, exc.message)
    except OSError as exc:
        return Probe(name, str(kind), False, exc.strerror or str(exc))


async def _a2a(back: Any) -> str:
    view, wire = await back.card()
    iface = getattr(wire, "iface", None)
    how = ""
    if iface is not None:
        dialect = getattr(getattr(iface, "dialect", None), "value", "?")
        binding = getattr(getattr(iface, "binding", None), "value", "?")
        how = f"; A2A {dialect} over {binding} at {getattr(iface, 'url', '?')}"
    return f"agent card of {getattr(view, 'name', None) or 'an unnamed agent'!r} read{how}"


async def _acp(name: str, route: Route, *, deep: bool) -> str:
    cfg = route.back
    command = cfg.command[0]  # type: ignore[union-attr]
    found = shutil.which(command)
    if found is None:
        raise _Failed(f"command {command!r} not found or not executable")
    if cfg.cwd is not None and not os.path.isdir(cfg.cwd):  # type: ignore[union-attr]
        raise _Failed(f"cwd {cfg.cwd!r} is not a directory")  # type: ignore[union-attr]
    if not deep:
        return f"command {found} found"
    from bridge.backs.acp_process import AgentProcess
    from bridge.backs.acp_setup import agent_env
    from bridge.schema import acp

    proc = AgentProcess(
        route=name,
        cfg=cfg,  # type: ignore[arg-type]
        argv=list(cfg.command),  # type: ignore[union-attr]
        env=agent_env(name, cfg),  # type: ignore[arg-type]
        cwd=cfg.cwd,  # type: ignore[union-attr]
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


class _Failed(BridgeError):
    pass


async def probe_routes(config: Config, *, deep: bool, backs: dict[str, Any] | None = None) -> list[Probe]:
    """Every route, probed concurrently; `backs` are reused when given (the daemon's)."""
    results: dict[str, Probe] = {}
    made: list[Any] = []

    async def one(name: str, route: Route) -> None:
        back = (backs or {}).get(name)
        if back is None:
            try:
                back = make_back(name, route)
            except BridgeError as exc:
                results[name] = Probe(name, str(route.back.__struct_config__.tag), False, exc.message)
                return
            made.append(back)
        results[name] = await probe_back(name, route, back, deep=deep, timeout_s=config.daemon.probe_timeout_s)

    try:
        async with trio.open_nursery() as nursery:
            for name, route in config.routes.items():
                nursery.start_soon(one, name, route)
    finally:
        for back in made:
            close = getattr(back, "aclose", None)
            if close is not None:
                with trio.move_on_after(2, shield=True):
                    await close()
    return [results[name] for name in config.routes]


class Readiness:
    """`/readyz`: listeners and store ready, and each route's back, probed at most every
    `probe_interval_s` (one probe round at a time; callers share its result)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.listeners_ready = False
        self.store_ready = False
        self._probes: list[Probe] = []
        self._at: float | None = None
        self._lock = trio.Lock()

    async def probes(self) -> list[Probe]:
        config = self.manager.config
        async with self._lock:
            now = trio.current_time()
            stale = self._at is None or now - self._at >= config.daemon.probe_interval_s
            if stale or {p.route for p in self._probes} != set(config.routes):
                backs = {}
                for name in config.routes:
                    try:
                        backs[name] = self.manager.back_for(name)
                    except BridgeError:
                        pass
                self._probes = await probe_routes(config, deep=False, backs=backs)
                self._at = trio.current_time()
            return self._probes

    async def report(self) -> tuple[bool, dict[str, Any]]:
        probes = await self.probes()
        ready = self.listeners_ready and self.store_ready and self.manager.accepting
        body = {
            "status": "ready" if ready else "not ready",
            "listeners": self.listeners_ready,
            "store": self.store_ready,
            "accepting": self.manager.accepting,
            "routes": {p.route: p.as_dict() for p in probes},
        }
        return ready, body


def render_table(probes: list[Probe]) -> str:
    rows = [("ROUTE", "BACK", "STATUS", "DETAIL")] + [(p.route, p.kind, p.status, p.detail) for p in probes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows)
