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

A PostgreSQL store (`[store] url`, `url_env` or `url_file`) gets a row of its own:

| `/readyz` | `doctor` |
|---|---|
| the daemon's store pinged (one round trip, bounded by `probe_timeout_s`, at most every `STORE_PING_EVERY_S`): not answering makes the daemon unready | a connection of its own: reached, the schema version against this release's, the round-trip time; else why, with the host and where the URL came from |
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import trio

from bridge.backs import Back, make_back
from bridge.config import Config, Route, StoreConfig, read_secret
from bridge.errors import BridgeError
from bridge.prompts.config import PromptSource

__all__ = [
    "SOURCE_KIND",
    "STORE_KIND",
    "STORE_PING_EVERY_S",
    "Probe",
    "Readiness",
    "check",
    "probe_back",
    "probe_routes",
    "probe_sources",
    "probe_store",
    "render_table",
]

log = logging.getLogger("bridge.doctor")

SOURCE_KIND = "mcp prompts"  # the KIND of a prompt source's row
STORE_KIND = "postgresql"  # the KIND of the store's row
STORE_PING_EVERY_S = 1.0  # /readyz pings the store at most this often, whoever asks


@dataclass(frozen=True)
class Probe:
    route: str
    kind: str
    ok: bool | None  # None: not checked
    detail: str
    hint: str | None = None  # what to do about a failure

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("not checked" if self.ok is None else "FAILED")

    def as_dict(self) -> dict[str, Any]:
        found = {"kind": self.kind, "status": self.status, "detail": self.detail}
        return found if self.hint is None else {**found, "hint": self.hint}

    @property
    def line(self) -> str:
        """The detail, with the hint when it failed."""
        return f"{self.detail}; hint: {self.hint}" if self.hint and self.ok is False else self.detail


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


def _store_url(store: StoreConfig) -> tuple[str | None, str]:
    """The PostgreSQL URL (None when it cannot be read) and where it comes from, for a hint."""
    if store.url is not None:
        return store.url, "[store] url"
    if store.url_env is not None:
        return read_secret(store.url_env, None), f"${store.url_env} ([store] url_env)"
    return read_secret(None, store.url_file), f"{store.url_file} ([store] url_file)"


def _pg_check(url: str, timeout_s: float) -> tuple[int | None, float]:
    """(schema version or None when there is no schema yet, best round trip in seconds);
    psycopg's error when the database cannot be reached. Runs in a worker thread."""
    import time

    import psycopg

    from bridge.store.pg_schema import schema_version

    with psycopg.connect(url, connect_timeout=max(1, math.ceil(timeout_s)), autocommit=True) as conn:
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            best = min(best, time.perf_counter() - start)
        version = schema_version(conn)  # the store's own reading of it (bridge/store/pg_schema.py)
        return (version or None), best


async def probe_store(config: Config) -> Probe | None:
    """`doctor`'s PostgreSQL row (None for SQLite): reached, its schema, its round trip."""
    if not config.store.postgres:
        return None
    from bridge.logs import add_secret, redact
    from bridge.store.sqlite_schema import SCHEMA_VERSION  # one schema, one version, both stores

    url, where = _store_url(config.store)
    if url is None:
        return Probe("store", STORE_KIND, False, f"no URL: {where} is not set or cannot be read")
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error as exc:  # not a libpq URL or key=value string (the message would show it)
        return Probe("store", STORE_KIND, False, f"not a PostgreSQL URL ({where}): {type(exc).__name__}")
    add_secret(str(parts.get("password") or "") or None)
    host = str(parts.get("host") or "localhost")
    timeout_s = config.daemon.probe_timeout_s
    try:
        with trio.fail_after(timeout_s + 1):
            version, rtt = await trio.to_thread.run_sync(_pg_check, url, timeout_s, abandon_on_cancel=True)
    except trio.TooSlowError:
        return Probe("store", STORE_KIND, False, f"{host}: no answer within {timeout_s:g} s (URL from {where})")
    except (psycopg.Error, OSError) as exc:  # say why, with where to look
        why = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return Probe("store", STORE_KIND, False, f"{host}: {why} (URL from {where})")
    rtt_ms = f"{rtt * 1000:.1f} ms round trip"
    if version is None:
        return Probe("store", STORE_KIND, True, f"{host}: reached, {rtt_ms}; no schema yet (the daemon creates it)")
    if version > SCHEMA_VERSION:
        return Probe("store", STORE_KIND, False, f"{host}: schema version {version} is newer than this agent-bridge's ({SCHEMA_VERSION})")
    older = "" if version == SCHEMA_VERSION else f", migrated to {SCHEMA_VERSION} when the daemon starts"
    return Probe("store", STORE_KIND, True, f"{host}: schema version {version}{older}, {rtt_ms}")


async def check(config: Config) -> tuple[list[Probe], list[Probe], list[Probe]]:
    """`agent-bridge doctor`: every route's back, every prompt source and a PostgreSQL
    store, tried once, concurrently."""
    found: dict[str, list[Probe]] = {}

    async def backs() -> None:
        found["routes"] = await probe_routes(config, deep=True)

    async def sources() -> None:
        found["sources"] = await probe_sources(config)

    async def store() -> None:
        row = await probe_store(config)
        found["store"] = [row] if row is not None else []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(backs)
        nursery.start_soon(sources)
        nursery.start_soon(store)
    return found["routes"], found["sources"], found["store"]


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
        self._store: tuple[bool, str] = (False, "not checked")
        self._store_at: float | None = None
        self._store_lock = trio.Lock()

    async def store(self) -> tuple[bool, str]:
        """Whether the store answers, and how: a store that can be pinged (PostgreSQL)
        is, at most every `STORE_PING_EVERY_S` (callers share the answer), each ping
        bounded by `[daemon] probe_timeout_s`; a local one is ready once open."""
        ping = getattr(self.manager.store, "ping", None)
        if not self.store_ready or ping is None:
            return self.store_ready, "open" if self.store_ready else "not open"
        async with self._store_lock:
            now = trio.current_time()
            if self._store_at is None or now - self._store_at >= STORE_PING_EVERY_S:
                self._store = await self._ping(ping)
                self._store_at = trio.current_time()
            return self._store

    async def _ping(self, ping: Any) -> tuple[bool, str]:
        timeout_s = self.manager.config.daemon.probe_timeout_s
        try:
            with trio.fail_after(timeout_s):
                rtt = await ping()
        except trio.TooSlowError:
            return False, f"no answer within {timeout_s:g} s"
        except BridgeError as exc:
            return False, exc.message
        except OSError as exc:
            return False, exc.strerror or str(exc)
        return True, f"{rtt * 1000:.1f} ms round trip"

    async def ready(self) -> tuple[bool, str | None]:
        """Whether the daemon takes work, and if not why, in words that name nothing."""
        if not self.listeners_ready:
            return False, "starting"
        if not self.manager.accepting:
            return False, "stopping"
        if not (await self.store())[0]:
            return False, "the store does not answer"
        return True, None

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
        ready, _why = await self.ready()
        store_ok, store_detail = await self.store()
        body = {
            "status": "ready" if ready else "not ready",
            "listeners": self.listeners_ready,
            "store": store_ok,
            "store_detail": store_detail,
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


def render_table(
    probes: list[Probe], sources: list[Probe] | None = None, store: list[Probe] | None = None, setup: list[Probe] | None = None
) -> str:
    """The routes' rows, then (when there are any) the prompt sources', the store's and the
    setup checks' (bridge/doctor_setup.py) under their own headers, all in the same columns;
    a failure's hint follows its detail."""
    rows = [("ROUTE", "BACK", "STATUS", "DETAIL")] + [(p.route, p.kind, p.status, p.line) for p in probes]
    for header, more in ((("PROMPT SOURCE", "KIND"), sources), (("STORE", "KIND"), store), (("SETUP", "CHECK"), setup)):
        if more:
            rows += [("", "", "", ""), (*header, "STATUS", "DETAIL")]
            rows += [(p.route, p.kind, p.status, p.line) for p in more]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows)
