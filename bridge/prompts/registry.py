"""The prompt registry: every route's slash commands, kept current, and their expansion.

One `PromptRegistry` per `SessionManager`, run in its nursery. It starts one
`McpSource` per configured MCP source (the `mcp` SDK is imported only then) and
keeps, for each route, the commands of its providers in order: its templates (the
route's own over the shared ones of the same name), then the shared sources, then
the route's sources (`text.assign_names` resolves clashes). The MCP front sees one
list of every template and source (`prompts()`), named by the same rule.

Listeners (`listen(route, callback)`) are told synchronously when a route's list may
have changed; a session then announces its commands again (`CommandsAvailable`).

A turn whose text starts with `/name` is resolved when it is started (`resolve`,
synchronous: an unknown command or a missing required argument is refused before any
turn exists) and expanded inside the turn (`expand`: the template filled in, or
`prompts/get` forwarded) before the back sees it. `/name` that is not a prompt but
one of the back's own commands is left for the back. Routes with no prompts are
untouched.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from bridge.config import Config
from bridge.core.content import ContentBlock, TextContent
from bridge.core.events import CommandInfo
from bridge.errors import InvalidParams, NotFound, PromptError
from bridge.prompts.config import PromptSource, PromptTemplate
from bridge.prompts.text import (
    Command,
    Provider,
    Role,
    assign_names,
    hint_of,
    parse_arguments,
    parse_invocation,
    render_template,
    spec_of_template,
    splice,
)

__all__ = ["Invocation", "PromptRegistry", "load_module"]

log = logging.getLogger("bridge.prompts")

_GLOBAL = ""  # the listener key of the list the MCP front serves
_IMPORTING = threading.Lock()


def _import(name: str) -> Any:
    # One import at a time: two threads importing the SDK's circular package tree at
    # once may each see the other's module half made.
    with _IMPORTING:
        return importlib.import_module(name)


async def load_module(name: str) -> Any:
    """Import `name` in a worker thread (the `mcp` SDK takes ~0.75 s), the loop running on."""
    return await trio.to_thread.run_sync(_import, name)


class Invocation(msgspec.Struct, kw_only=True):
    """A `/name args` prompt, resolved when its turn started."""

    route: str
    name: str
    command: Command | None  # None: the name was unknown while a source was still starting
    arguments: dict[str, str]
    line: str  # the rest of the first line (parsed again once `command` is known)
    after: str  # the lines after the first
    others: list[ContentBlock]  # the prompt's other blocks (attachments)
    # The turn's W3C trace context, sent as `_meta` with `prompts/get` (MCP SEP-414).
    trace: dict[str, str] = {}


class PromptRegistry:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._sources: dict[str, Any] = {}  # name → McpSource, once its task has made it
        self._running: dict[str, tuple[PromptSource, trio.CancelScope]] = {}
        self._nursery: trio.Nursery | None = None
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._routes: dict[str, dict[str, Command]] = {}
        self._global: dict[str, Command] = {}
        self._rebuild()

    # -- lifecycle ---------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the MCP sources until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._start_sources()
            task_status.started()
            await trio.sleep_forever()

    def _configured_sources(self, config: Config) -> dict[str, PromptSource]:
        found = {s.name: s for s in config.prompt_sources}
        for route in config.routes.values():
            found.update((s.name, s) for s in route.prompt_sources)
        return found

    def _start_sources(self) -> None:
        wanted = self._configured_sources(self._config)
        for name, (cfg, scope) in list(self._running.items()):
            if wanted.get(name) != cfg:
                scope.cancel()  # its process or connection ends with it
                del self._running[name]
        if self._nursery is None:
            return
        for name, cfg in wanted.items():
            if name not in self._running:
                scope = trio.CancelScope()
                self._running[name] = (cfg, scope)
                self._nursery.start_soon(self._run_source, cfg, scope)

    async def _run_source(self, cfg: PromptSource, scope: trio.CancelScope) -> None:
        from bridge.prompts import stdio

        with scope:
            async with trio.open_nursery() as nursery:
                process = None
                if cfg.command is not None:
                    # Started while the SDK loads: their start-ups overlap (bench/mcp_prompts.py).
                    try:
                        process = await stdio.spawn(cfg, nursery)
                    except PromptError:
                        pass  # the source tries again, and says why (McpSource.run)
                # The SDK only when a source is configured, and off the event loop (~0.75 s).
                try:
                    module = await load_module("bridge.prompts.mcp_source")
                except BaseException:
                    if process is not None:
                        await stdio.stop(process)
                    raise
                source = module.McpSource(cfg, self._source_changed)
                self._sources[cfg.name] = source
                try:
                    await source.run(process=process)
                finally:
                    if self._sources.get(cfg.name) is source:
                        del self._sources[cfg.name]

    def reconfigure(self, config: Config) -> None:
        """Use `config` from now on (SIGHUP): changed sources restart, removed ones stop."""
        self._config = config
        self._start_sources()
        self._rebuild()
        self._notify(None)

    # -- the lists -----------------------------------------------------------------------
    def _providers(self, route: str | None) -> list[Provider]:
        """A route's providers in claim order, or every provider (None: the MCP front's list)."""
        cfg = self._config
        out: list[Provider] = []

        def templates(name: str, prefix: str, items: dict[str, PromptTemplate]) -> None:
            if items:
                specs = tuple(spec_of_template(n, t) for n, t in items.items())
                out.append(Provider(name=prefix, specs=specs, templates=name))

        def sources(items: list[PromptSource]) -> None:
            for src in items:
                live = self._sources.get(src.name)
                out.append(Provider(name=src.name, specs=live.specs if live is not None else (), source=src.name))

        if route is None:
            templates("", "prompts", cfg.prompts)
            for name, r in cfg.routes.items():
                templates(name, name, r.prompts)
            sources(cfg.prompt_sources)
            for r in cfg.routes.values():
                sources(r.prompt_sources)
            return out
        r = cfg.routes[route]
        shared = cfg.prompts if r.shared_prompts else {}
        own = {**shared, **r.prompts}  # the route's own template wins over a shared one of its name
        if own:
            specs = tuple(spec_of_template(n, t) for n, t in own.items())
            out.append(Provider(name=route, specs=specs, templates=route))
        sources(cfg.prompt_sources if r.shared_prompts else [])
        sources(r.prompt_sources)
        return out

    def _rebuild(self) -> None:
        self._routes = {name: assign_names(self._providers(name)) for name in self._config.routes}
        self._global = assign_names(self._providers(None))

    def _source_changed(self, source: Any) -> None:
        self._rebuild()
        self._notify(source.name)

    def _notify(self, source: str | None) -> None:
        for key, callbacks in list(self._listeners.items()):
            if source is not None and key != _GLOBAL and key in self._config.routes:
                r = self._config.routes[key]
                uses = [s.name for s in (self._config.prompt_sources if r.shared_prompts else [])] + [
                    s.name for s in r.prompt_sources
                ]
                if source not in uses:
                    continue
            for callback in list(callbacks):
                callback()

    def listen(self, route: str | None, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the route's commands (None: the MCP front's prompts) may have changed."""
        key = _GLOBAL if route is None else route
        self._listeners.setdefault(key, []).append(callback)

        def unlisten() -> None:
            callbacks = self._listeners.get(key, [])
            if callback in callbacks:
                callbacks.remove(callback)

        return unlisten

    def has_prompts(self, route: str) -> bool:
        r = self._config.routes.get(route)
        if r is None:
            return False
        return bool(r.prompts or r.prompt_sources or (r.shared_prompts and (self._config.prompts or self._config.prompt_sources)))

    def commands(self, route: str) -> list[CommandInfo]:
        """The route's prompts as commands (synchronous; for A2A skills and the like)."""
        return [
            CommandInfo(name=c.name, description=c.spec.description or c.spec.title or "", hint=hint_of(c.spec))
            for c in self._routes.get(route, {}).values()
        ]

    def merged(self, route: str, back_commands: list[CommandInfo]) -> list[CommandInfo]:
        """The back's own commands, then the route's prompts; a prompt hides a back command of its name."""
        prompts = self.commands(route)
        names = {c.name for c in prompts}
        return [c for c in back_commands if c.name not in names] + prompts

    def prompts(self) -> dict[str, Command]:
        """Every template and source prompt under the name the MCP front serves it."""
        return self._global

    def source(self, name: str) -> Any:
        return self._sources.get(name)

    async def settle(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until every source has listed once or failed once."""
        with trio.move_on_after(timeout_s):
            for name in list(self._running):
                while self._sources.get(name) is None and name in self._running:
                    await trio.sleep(0.02)
                source = self._sources.get(name)
                if source is not None:
                    await source.settled.wait()

    def _pending(self, route: str) -> bool:
        r = self._config.routes[route]
        names = [s.name for s in (self._config.prompt_sources if r.shared_prompts else [])] + [s.name for s in r.prompt_sources]
        return any(self._sources.get(n) is None or not self._sources[n].settled.is_set() for n in names if n in self._running)

    # -- invocation --------------------------------------------------------------------------
    def resolve(self, route: str, content: list[ContentBlock], back_commands: list[str]) -> Invocation | None:
        """The invocation a prompt starts with, checked now; None when it is no prompt command.

        InvalidParams (no turn starts): an unknown command on a route that has prompts,
        a missing required argument, an unclosed quote. Each message names what is
        wrong and the command's usage.
        """
        if not content or not isinstance(content[0], TextContent) or route not in self._routes:
            return None
        parsed = parse_invocation(content[0].text)
        if parsed is None:
            return None
        name, line, after = parsed
        command = self._routes[route].get(name)
        if command is None:
            if name in back_commands or not self.has_prompts(route):
                return None  # the back's own command (or a route without prompts): the back decides
            if self._pending(route):
                # A source is still starting: look again inside the turn, once it has listed.
                return Invocation(route=route, name=name, command=None, arguments={}, line=line, after=after, others=content[1:])
            raise InvalidParams(self._unknown(route, name, back_commands), data={"command": name})
        arguments = parse_arguments(line, command.spec, _usage(command))
        return Invocation(route=route, name=name, command=command, arguments=arguments, line=line, after=after, others=content[1:])

    def _unknown(self, route: str, name: str, back_commands: list[str]) -> str:
        known = sorted({*self._routes.get(route, {}), *back_commands})
        usage = "; ".join(_usage(c) for c in self._routes[route].values())
        return f"unknown command /{name}; commands are: {', '.join('/' + k for k in known) or 'none'}" + (
            f" (prompts: {usage})" if usage else ""
        )

    async def expand(self, invocation: Invocation, *, wait_s: float = 30.0) -> list[ContentBlock]:
        """The prompt the back receives. PromptError when the prompt cannot be had (its
        source is down or refuses the arguments); the turn then fails with that message."""
        command = invocation.command
        if command is None:
            with trio.move_on_after(wait_s):
                while self._pending(invocation.route):
                    await trio.sleep(0.05)
            command = self._routes.get(invocation.route, {}).get(invocation.name)
            if command is None:
                raise PromptError(self._unknown(invocation.route, invocation.name, []))
            try:
                invocation.arguments = parse_arguments(invocation.line, command.spec, _usage(command))
            except InvalidParams as exc:
                raise PromptError(exc.message, data=exc.data) from exc
        messages = await self._messages(command, invocation.arguments, invocation.trace)
        log.info("prompt /%s expanded (%d messages)", command.name, len(messages))
        return splice(command.name, messages, invocation.after, invocation.others)

    async def _messages(
        self, command: Command, arguments: dict[str, str], trace: dict[str, str] | None = None
    ) -> list[tuple[Role, ContentBlock]]:
        provider = command.provider
        if provider.templates is not None:
            return render_template(self._template(provider.templates, command.spec.name), arguments)
        source = self._sources.get(provider.source or "")
        if source is None:
            raise PromptError(f"prompt source {provider.source} is not running")
        from bridge.prompts.mcp_source import to_messages

        result = await source.get(command.spec.name, arguments, meta=trace or None)
        try:
            return to_messages(result)
        except msgspec.ValidationError as exc:
            raise PromptError(f"prompt source {source.name} sent a message this bridge cannot carry: {exc}") from exc

    def _template(self, owner: str, name: str) -> PromptTemplate:
        """A route's template (its own, else the shared one), or a shared one (owner "")."""
        if owner:
            r = self._config.routes[owner]
            found = r.prompts.get(name) or (self._config.prompts.get(name) if r.shared_prompts else None)
        else:
            found = self._config.prompts.get(name)
        if found is None:
            raise NotFound(f"no prompt template {name!r}")
        return found

    # -- the MCP front ---------------------------------------------------------------------------
    def template_of(self, command: Command) -> PromptTemplate | None:
        owner = command.provider.templates
        return None if owner is None else self._template(owner, command.spec.name)


def _usage(command: Command) -> str:
    hint = hint_of(command.spec)
    return f"/{command.name} {hint}" if hint else f"/{command.name}"
