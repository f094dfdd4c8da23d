"""Is each route's back reachable? For `agent-bridge doctor` and the daemon's `/readyz`.

A probe tries a back once through its own `probe(deep=)` (the `Back` protocol,
bridge/backs/base.py) and says what it found, in words an operator can act on:

| back | shallow (`/readyz`, cached) | deep (`doctor`) |
|---|---|---|
| demo | built in: always ok | same |
| a2a | the agent card is fetched (the back's own card cache) | same |
| acp | the agent's command is found and executable | the agent is spawned, `initialize`d (and `authenticate`d), then ended |
| chat | the platform is reached and authenticated | same |

MCP prompt sources (`[[prompt_sources]]`, `[[routes.R.prompt_sources]]`) get a row each:

| `/readyz` | `doctor` |
|---|---|
| what the daemon's own connection to it says (`PromptRegistry`): up with N prompts, starting, or down and why | it is started or reached, `initialize`d and listed once, then ended, through the daemon's code (`McpSource`) |

The `mcp` SDK is imported (in a worker thread) only when a source is configured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import trio

from bridge.backs import Back, make_back
from bridge.config import Config, Route
from bridge.errors import BridgeError
from bridge.prompts.config import PromptSource

__all__ = ["SOURCE_KIND", "Probe", "Readiness", "check", "probe_back", "probe_routes", "probe_sources", "render_table"]

log = logging.getLogger("bridge.doctor")

SOURCE_KIND = "mcp prompts"  # the KIND of a prompt source's row


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


async def probe_back(name: str, route: Route, back: Back, *, deep: bool, timeout_s: float) -> Probe:
    kind = str(route.back.__struct_config__.tag)
    try:
        with trio.fail_after(timeout_s):
            return Probe(name, kind, True, await back.probe(deep=deep))
    except trio.TooSlowError:
        return Probe(name, kind, False, f"no answer within {timeout_s:g} s")
    except BridgeError as exc:
        return Probe(name, kind, False, exc.message)
    except OSError as exc:
        return Probe(name, kind, False, exc.strerror or str(exc))


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
            with trio.move_on_after(2, shield=True):
                try:
                    await back.aclose()
                except Exception:
                    log.exception("closing the %s back after its probe failed", type(back).__name__)
    return [results[name] for name in config.routes]


def _prompt_sources(config: Config) -> list[PromptSource]:
    """Every configured source once, in config order: the shared ones, then each route's."""
    return [*config.prompt_sources, *(s for route in config.routes.values() for s in route.prompt_sources)]


def _source_row(source: Any) -> Probe:
    """A running `McpSource` as a row: up (its prompts), down (why), or not settled yet."""
    if source.up:
        transport = "stdio" if source.cfg.command is not None else "Streamable HTTP"
        count = len(source.specs)
        return Probe(
            source.name,
            SOURCE_KIND,
            True,
            f"{source.server or 'the server'} initialized ({transport}); {count} prompt{'' if count == 1 else 's'}",
        )
    if source.settled.is_set():
        return Probe(source.name, SOURCE_KIND, False, source.why)
    return Probe(source.name, SOURCE_KIND, None, "starting")


async def _probe_source(module: Any, cfg: PromptSource, *, timeout_s: float) -> Probe:
    # The daemon's own connection (McpSource.run), kept only until it has listed or
    # failed once: the same spawn, transport, handshake and listing, and the same words.
    source = module.McpSource(cfg, lambda _source: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run)
        with trio.move_on_after(timeout_s):
            await source.settled.wait()
        nursery.cancel_scope.cancel()  # its process or connection ends with it (bounded, shielded)
    row = _source_row(source)
    if row.ok is None:
        return Probe(cfg.name, SOURCE_KIND, False, f"no answer within {timeout_s:g} s")
    return row


async def probe_sources(config: Config) -> list[Probe]:
    """Every MCP prompt source started (or reached), initialized and listed once, concurrently."""
    sources = _prompt_sources(config)
    if not sources:
        return []
    from bridge.prompts.registry import load_module

    # Before the clock starts: importing the SDK (~0.75 s) is not the source's fault.
    module = await load_module("bridge.prompts.mcp_source")
    timeout_s = config.daemon.probe_timeout_s
    results: dict[str, Probe] = {}

    async def one(cfg: PromptSource) -> None:
        results[cfg.name] = await _probe_source(module, cfg, timeout_s=timeout_s)

    async with trio.open_nursery() as nursery:
        for cfg in sources:
            nursery.start_soon(one, cfg)
    return [results[cfg.name] for cfg in sources]


async def check(config: Config) -> tuple[list[Probe], list[Probe]]:
    """`agent-bridge doctor`: every route's back and every prompt source, tried once, concurrently."""
    found: dict[str, list[Probe]] = {}

    async def backs() -> None:
        found["routes"] = await probe_routes(config, deep=True)

    async def sources() -> None:
        found["sources"] = await probe_sources(config)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(backs)
        nursery.start_soon(sources)
    return found["routes"], found["sources"]


class Readiness:
    """`/readyz`: listeners and store ready, each route's back, probed at most every
    `probe_interval_s` (one probe round at a time; callers share its result), and each
    prompt source as the daemon's connection to it is now."""

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
            # The daemon's own connections, as they are now (no extra connection): a
            # source that is down does not make the daemon unready, as for a back.
            "prompt_sources": {p.route: p.as_dict() for p in self.sources()},
        }
        return ready, body

    def sources(self) -> list[Probe]:
        """A row per configured prompt source, from the registry's running `McpSource`s."""
        registry = self.manager.prompts
        rows = []
        for cfg in _prompt_sources(self.manager.config):
            live = registry.source(cfg.name)
            rows.append(_source_row(live) if live is not None else Probe(cfg.name, SOURCE_KIND, None, "starting"))
        return rows


def render_table(probes: list[Probe], sources: list[Probe] | None = None) -> str:
    """The routes' rows, then (when there are any) the prompt sources' under their own header,
    both in the same columns."""
    rows = [("ROUTE", "BACK", "STATUS", "DETAIL")] + [(p.route, p.kind, p.status, p.detail) for p in probes]
    if sources:
        rows += [("", "", "", ""), ("PROMPT SOURCE", "KIND", "STATUS", "DETAIL")]
        rows += [(p.route, p.kind, p.status, p.detail) for p in sources]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows)
