"""The ACP back: coding agents that speak ACP, spawned as subprocesses (ACP v1).

A route `back = { kind = "acp", command = [...] }` runs one agent process per bridge
session (or one per route with `multiplex = true`, each session/update routed by
its sessionId). `AcpSession.prompt` starts the agent if it is not running
(`initialize`, `authenticate`, `session/new`, or `session/load` after a crash when
the agent advertises `loadSession`, its replay swallowed), sends `session/prompt`
and streams every `session/update` into the canonical model until the stop reason.

Requests from the agent (requests.py):
- `session/request_permission` becomes a canonical permission Question with the
  agent's own options, unless the route's policy answers (`allow_read`, `deny`).
  A deny, a timeout or an editor that went away picks a reject option; only a
  cancelled turn answers `cancelled` (DESIGN.md, complaint 9).
- `elicitation/create` (form mode, declared in `initialize`) becomes a canonical
  choice or form Question (codecs/acp_elicitation.py); outside a turn it is declined.
- `fs/*` and `terminal/*` go to the editor when an ACP front offers them
  (`SessionHost.client_services`), else to `acp_local` if the route allows it.

The agent's slash commands, modes and config options reach every front as
CommandsAvailable and OptionsChanged (through `SessionHost.set_back_options`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import msgspec
import trio

from bridge.backs.acp.local import LocalFiles, LocalTerminals
from bridge.backs.acp.process import AgentProcess
from bridge.backs.acp.requests import answer_elicitation, answer_permission, client_service
from bridge.backs.acp.setup import (
    MODE,
    STOPS,
    agent_env,
    mcp_wire,
    mode_from_wire,
    options_from_wire,
    prompt_decoder,
    said,
    setup_decoder,
)
from bridge.backs.base import AgentInfo, SessionContext, TaskSpawner, TurnHandle
from bridge.codecs import safejson
from bridge.codecs.acp import to_turn
from bridge.codecs.acp_content import wire_blocks
from bridge.codecs.jsonrpc import decode_params
from bridge.backs.acp.config import AcpBackConfig
from bridge.config import Route
from bridge.core import events as ev
from bridge.errors import BackError, BackUnavailable, MethodNotFound
from bridge.schema import acp

__all__ = ["AcpBack", "AcpSession"]

log = logging.getLogger("bridge.backs.acp.back")

_STREAMED = frozenset((acp.AgentMessageChunk, acp.AgentThoughtChunk, acp.ToolCallUpdate, acp.Plan))
_dict_decoder = safejson.Decoder(dict[str, Any])


class AcpBack:
    """The back of one route; owns the shared agent process when `multiplex` is on."""

    def __init__(self, name: str, route: Route) -> None:
        assert isinstance(route.back, AcpBackConfig)
        self.name = name
        self.route = route
        self.cfg: AcpBackConfig = route.back
        self.info = AgentInfo(
            name=os.path.basename(self.cfg.command[0]),
            title=route.title or name,
            version=route.version,
            description=route.description,
        )
        self._shared: AgentProcess | None = None
        self._shared_lock = trio.Lock()

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> AcpSession:
        return AcpSession(self, ctx, nursery)

    async def ready(self) -> None:
        """The agent describes itself only once spawned: nothing to look up first."""

    async def probe(self, *, deep: bool) -> str:
        from bridge.backs.acp.probe import probe_agent

        return await probe_agent(self.name, self.cfg, deep=deep)

    async def aclose(self) -> None:
        """Nothing to free here: each session ends its agent, and the last one out ends
        a shared one (`release`)."""

    def workdir(self, ctx: SessionContext) -> str | None:
        """The route's cwd, else the session's (an editor's project), else ours."""
        if self.cfg.cwd:
            return self.cfg.cwd
        return ctx.cwd if ctx.cwd and os.path.isabs(ctx.cwd) and os.path.isdir(ctx.cwd) else None

    async def process_for(self, session: AcpSession) -> AgentProcess:
        """A running agent for `session`: its own, or the route's shared one."""
        if not self.cfg.multiplex:
            return await self._spawn(session, session.nursery)
        async with self._shared_lock:
            if self._shared is None or not self._shared.alive:
                host = session.ctx.host
                nursery = host.shared_nursery if host is not None else session.nursery
                self._shared = await self._spawn(session, nursery)
            return self._shared

    async def _spawn(self, session: AcpSession, nursery: trio.Nursery | TaskSpawner) -> AgentProcess:
        cfg = self.cfg
        services = session.ctx.host.client_services if session.ctx.host is not None else None
        # Offer the agent what is there at spawn time (ACP, Initialization: `clientCapabilities`): the editor's
        # files and terminals, else what the route serves itself.
        caps = acp.ClientCapabilities(
            fs=acp.FsCapabilities(
                read_text_file=bool(services and services.fs_read) or cfg.fs != "off",
                write_text_file=bool(services and services.fs_write) or cfg.fs == "cwd",
            ),
            terminal=bool(services and services.terminal) or cfg.terminal,
            # Form questions are asked of whoever the turn's fronts reach (`answer_elicitation`);
            # URL mode is not served, so not declared (ACP schema, `ElicitationCapabilities`).
            elicitation=acp.ElicitationCapabilities(form={}),
        )
        proc = AgentProcess(
            route=self.name,
            cfg=cfg,
            argv=list(cfg.command),
            env=agent_env(self.name, cfg),
            cwd=self.workdir(session.ctx),
            client_caps=caps,
            owner=session.session_id,
        )
        await proc.start(nursery=nursery)
        return proc

    async def release(self, proc: AgentProcess) -> None:
        """A session is done with `proc`; the last one out ends a shared process."""
        proc.users -= 1
        if proc.users <= 0:
            if proc is self._shared:
                self._shared = None
            await proc.stop()


class AcpSession:
    """One bridge session's conversation with an agent (its `Handler` for the process)."""

    def __init__(self, back: AcpBack, ctx: SessionContext, nursery: trio.Nursery) -> None:
        self.back = back
        self.cfg = back.cfg
        self.ctx = ctx
        self.nursery = nursery
        self.session_id = ctx.session_id
        self.proc: AgentProcess | None = None
        self.agent_sid: str | None = None
        self.back_ref = ctx.back_ref
        self.turn: TurnHandle | None = None
        self.loading = False
        self._config: list[ev.ConfigOption] = []  # the agent's config options
        self._mode: ev.ConfigOption | None = None  # its session modes, as an option
        self.tool_calls: dict[str, str] = {}  # tool call id → kind, this turn
        self._lock = trio.Lock()
        self.questions = 0  # permission questions asked, for unique ids
        root = back.cfg.cwd
        self.files = LocalFiles(root, writable=self.cfg.fs == "cwd", max_bytes=self.cfg.max_frame_bytes // 2, timeout_s=self.cfg.fs_timeout_s) if root and self.cfg.fs != "off" else None  # fmt: skip
        self.terminals: LocalTerminals | None = None
        if root and self.cfg.terminal:
            self.terminals = LocalTerminals(
                root,
                env=agent_env(back.name, self.cfg),
                limit=self.cfg.terminal_output_bytes,
                max_count=self.cfg.max_terminals,
                grace=self.cfg.kill_grace_s,
            )

    # -- BackSession --------------------------------------------------------------------
    async def prompt(self, turn: TurnHandle) -> ev.StopReason:
        proc, sid = await self._ready(turn)
        if turn.cancel_requested:
            return ev.StopReason.CANCELLED  # cancelled while the agent was starting
        self.tool_calls.clear()
        self.turn = turn

        def settled() -> None:
            self.turn = None  # anything after the response belongs to no turn

        try:
            # `_meta.traceparent` (ACP extensibility, "The _meta field"): the agent's work joins the turn's trace.
            params = acp.PromptParams(session_id=sid, prompt=wire_blocks(turn.prompt), meta=turn.trace.carrier() or None)
            reply = await proc.call("session/prompt", params, on_settle=settled)
        except BackUnavailable:
            raise BackError(f"route {self.back.name}: the agent {proc.dead or 'stopped'} during the turn") from None
        finally:
            self.turn = None
        if reply.error is not None:
            raise BackError(f"route {self.back.name}: the agent failed the turn: {said(reply.error)}", data=reply.error.data)
        try:
            result = prompt_decoder.decode(reply.result or b"null")
        except (msgspec.ValidationError, msgspec.DecodeError):
            result = None
        stop = STOPS.get(result.stop_reason) if result is not None and isinstance(result.stop_reason, str) else None
        if stop is None:
            got = "no stopReason" if result is None or result.stop_reason is None else f"stopReason {result.stop_reason!r}"
            raise BackError(f"route {self.back.name}: the agent answered session/prompt with {got}")
        return stop

    async def cancel(self) -> None:
        proc = self.proc
        if proc is not None and proc.alive and self.agent_sid is not None:
            proc.notify("session/cancel", acp.SessionIdParams(session_id=self.agent_sid))

    async def set_option(self, option_id: str, value: str) -> None:
        proc, sid = self.proc, self.agent_sid
        known = next((o for o in self.options if o.id == option_id), None)
        if known is None or proc is None or not proc.alive or sid is None:
            return  # a route option the agent does not have, or no agent yet: applied at start
        await self._apply_option(proc, sid, known, value)

    async def aclose(self) -> None:
        proc, sid = self.proc, self.agent_sid
        self.proc = None
        if proc is None:
            return
        if sid is not None and self.cfg.multiplex:
            # The agent serves others: close just this session (its own process, if not
            # shared, gets session/close as it is ended: AgentProcess._deliver_cancel).
            proc.sessions.pop(sid, None)
            if proc.alive and proc.init.agent_capabilities.session_capabilities.get("close") is not None:
                try:
                    await proc.call("session/close", acp.SessionIdParams(session_id=sid), timeout=min(2.0, self.cfg.request_timeout_s))
                except BackError as exc:
                    log.info("route %s session %s: session/close: %s", self.back.name, self.session_id, exc.message)
        await self.back.release(proc)
        if sid is not None:
            proc.sessions.pop(sid, None)

    # -- start and restart --------------------------------------------------------------
    async def _ready(self, turn: TurnHandle) -> tuple[AgentProcess, str]:
        async with self._lock:
            proc = self.proc
            if proc is not None and proc.alive and self.agent_sid is not None:
                return proc, self.agent_sid
            if proc is not None:
                why = proc.dead or "has no session"
                log.info("route %s session %s: the agent %s; starting a new one", self.back.name, self.session_id, why)
                await self.back.release(proc)
                self.proc, self.agent_sid = None, None
            proc = await self.back.process_for(self)
            proc.users += 1
            self.proc = proc
            try:
                with trio.fail_after(self.cfg.startup_timeout_s):
                    sid = await self._open(proc)
            except trio.TooSlowError:
                raise BackUnavailable(
                    f"route {self.back.name}: the agent did not open a session within startup_timeout_s "
                    f"({self.cfg.startup_timeout_s:g} s)"
                ) from None
            self.agent_sid = sid
            turn.set_back_ref(sid)
            self.back_ref = sid
            applied = False
            for key, value in turn.options.items():
                known = next((o for o in self.options if o.id == key), None)
                if known is not None and known.current != value and any(v.value == value for v in known.values):
                    try:  # what the user chose before a restart; the turn goes on without it
                        await self._apply_option(proc, sid, known, value)
                        applied = True
                    except BackError as exc:
                        log.warning("route %s session %s: %s", self.back.name, self.session_id, exc.message)
            if applied and self.ctx.host is not None:
                self.ctx.host.set_back_options(self.options)
            return proc, sid

    async def _open(self, proc: AgentProcess) -> str:
        name = self.back.name
        cwd = self.back.workdir(self.ctx) or os.getcwd()
        mcp = [mcp_wire(name, s) for s in self.cfg.mcp_servers]
        seen = {s["name"] for s in mcp}
        mcp += [s for s in self.ctx.meta.get("mcpServers") or [] if isinstance(s, dict) and s.get("name") not in seen]
        if self.back_ref and proc.init.agent_capabilities.load_session:
            # Its context survives a crash or a bridge restart; the replay is swallowed
            # (the session's own log already holds those events).
            self.loading = True
            proc.sessions[self.back_ref] = self
            try:
                # mcpServers is required on the wire: plain dicts, so omit_defaults cannot drop it.
                reply = await proc.call("session/load", {"sessionId": self.back_ref, "cwd": cwd, "mcpServers": mcp})
            finally:
                self.loading = False
            if reply.error is None:
                self._take_options(reply.result)
                log.info("route %s session %s: agent session %s loaded", name, self.session_id, self.back_ref)
                return self.back_ref
            proc.sessions.pop(self.back_ref, None)
            log.warning("route %s session %s: the agent could not load its session %s (%s); starting a new one",
                        name, self.session_id, self.back_ref, reply.error.message)  # fmt: skip
        elif self.back_ref:
            log.info("route %s session %s: the agent cannot load sessions; its earlier context is lost", name, self.session_id)
        reply = await proc.call("session/new", {"cwd": cwd, "mcpServers": mcp})
        if reply.error is not None:
            hint = ""
            if reply.error.code == -32000 and proc.init.auth_methods:
                hint = f" (it asks for authentication: set auth_method to one of {[m.get('id') for m in proc.init.auth_methods]})"
            raise BackUnavailable(f"route {name}: the agent refused session/new: {said(reply.error)}{hint}")
        try:
            result = setup_decoder.decode(reply.result or b"null")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise BackUnavailable(f"route {name}: the agent's session/new result is invalid: {exc}") from exc
        if result is None or not isinstance(result.session_id, str):
            raise BackUnavailable(f"route {name}: the agent's session/new result has no sessionId")
        proc.sessions[result.session_id] = self
        self._publish(result.config_options, result.modes)
        return result.session_id

    # -- options ------------------------------------------------------------------------
    @property
    def options(self) -> list[ev.ConfigOption]:
        """Config options first; the modes only when no option already is the mode."""
        if self._mode is not None and not any(o.category == "mode" or o.id == MODE for o in self._config):
            return [*self._config, self._mode]
        return self._config

    def _take_options(self, raw: msgspec.Raw | None) -> None:
        try:
            result = setup_decoder.decode(raw or b"null")
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        if result is not None and (result.config_options is not None or result.modes is not None):
            self._publish(result.config_options, result.modes)

    def _publish(self, config: list[dict[str, Any]] | None, modes: dict[str, Any] | None, *, keep_mode: bool = False) -> None:
        self._config = options_from_wire(config)
        if not keep_mode:
            self._mode = mode_from_wire(modes)
        host = self.ctx.host
        if host is not None and (self._config or self._mode is not None):
            host.set_back_options(self.options)

    async def _apply_option(self, proc: AgentProcess, sid: str, option: ev.ConfigOption, value: str) -> None:
        timeout = self.cfg.request_timeout_s
        if option is self._mode:
            reply = await proc.call("session/set_mode", acp.SetModeParams(session_id=sid, mode_id=value), timeout=timeout)
        else:
            params = acp.SetConfigOptionParams(session_id=sid, config_id=option.id, value=value)
            reply = await proc.call("session/set_config_option", params, timeout=timeout)
        if reply.error is not None:
            raise BackError(f"route {self.back.name}: the agent refused to set {option.id!r}: {reply.error.message}")
        if option is self._mode:
            self._mode = msgspec.structs.replace(option, current=value)
            return
        try:
            body = _dict_decoder.decode(reply.result or b"{}")
        except (msgspec.ValidationError, msgspec.DecodeError):
            body = {}
        if isinstance(body.get("configOptions"), list):  # the full set, as the agent now has it
            self._config = options_from_wire(body["configOptions"])
        else:
            self._config = [msgspec.structs.replace(o, current=value) if o is option else o for o in self._config]

    # -- Handler: what the agent sends ----------------------------------------------------
    def on_update(self, update: acp.SessionUpdate) -> TurnHandle | None:
        t = type(update)
        turn = self.turn
        if t in _STREAMED and turn is not None and not self.loading:
            # The hot path: message and thought chunks, tool call progress, plans.
            event = to_turn(update)
            if event is not None:
                turn.emit(event)
                return turn
            return None
        if t is acp.ToolCall:
            self.tool_calls[update.tool_call_id] = update.kind or "other"  # type: ignore[union-attr]
        elif t is acp.ConfigOptionUpdate or t is acp.CurrentModeUpdate:
            self._option_update(update)
            return None
        elif t is acp.AvailableCommandsUpdate:
            event = to_turn(update)
            assert isinstance(event, ev.CommandsAvailable)
            self.back.info.commands = event.commands  # a later session hears them at once
            return self._emit_state(event)
        if self.loading:
            return None  # a session/load replay: the bridge's own log has these
        event = to_turn(update)
        if event is None:
            return None
        if turn is not None:
            turn.emit(event)
            return turn
        if t is acp.UsageUpdate:
            return self._emit_state(event)
        log.warning("route %s session %s: the agent sent %s outside a turn (after its prompt response?); dropped",
                    self.back.name, self.session_id, t.__struct_config__.tag)  # fmt: skip
        return None

    def _emit_state(self, event: ev.Event) -> TurnHandle | None:
        if self.turn is not None:
            self.turn.emit(event)
            return self.turn
        if self.ctx.host is not None:
            self.ctx.host.emit(event)
        return None

    def _option_update(self, update: Any) -> None:
        if type(update) is acp.CurrentModeUpdate:
            if self._mode is not None:
                self._mode = msgspec.structs.replace(self._mode, current=update.current_mode_id)
            host = self.ctx.host
            if host is not None and self._mode is not None:
                host.set_back_options(self.options)
        else:
            self._publish([msgspec.to_builtins(o) for o in update.config_options], None, keep_mode=True)

    def on_odd_update(self, kind: str, update: dict[str, Any]) -> None:
        if kind == "config_option_update" and isinstance(update.get("configOptions"), list):
            self._publish(update["configOptions"], None, keep_mode=True)
        else:
            log.debug("route %s session %s: agent update %r not modelled; dropped", self.back.name, self.session_id, kind)

    async def on_call(self, method: str, params: msgspec.Raw | None) -> Any:
        if method == "session/request_permission":
            return await answer_permission(self, decode_params(params, acp.RequestPermissionParams))
        if method == "elicitation/create":
            return await answer_elicitation(self, decode_params(params, acp.ElicitationParams))
        if method.startswith(("fs/", "terminal/")):
            return await client_service(self, method, params)
        raise MethodNotFound(f"method not found: {method}")
