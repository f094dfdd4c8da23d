"""The MCP front: the bridge as an MCP server (revision 2025-11-25), on the official `mcp` SDK.

Served at `/mcp` on the daemon's listener (Streamable HTTP, `fronts/mcp/streamable_http.py`) and
by `agent-bridge mcp` over stdio (`serve_mcp_stdio`). The SDK's low-level `Server`
carries the protocol; this module answers (MCP 2025-11-25, Server features):

- `prompts/list`: every template and MCP source prompt of the configuration, named as
  in `PromptRegistry.prompts()` (clashes: README, "MCP prompts"); pages of 100.
- `prompts/get`: filled from a template, or forwarded to the source (its result as it
  sent it); an unknown prompt or a missing required argument is -32602.
- `completion/complete`: forwarded to a source that offers completions; a template
  argument's declared `values` that start with what was typed.
- `notifications/prompts/list_changed` (and `tools/list_changed`) to every initialized
  connection whenever the list changes; `listChanged: true` is advertised (the SDK's
  default initialization options would say false).
- tools: every route the caller may use (`[routes.NAME.access]`; over stdio the caller
  is the user who started the process, as for `agent-bridge acp`), `tools/call`
  running one turn (`fronts/mcp/tools.py`).

Imported only by the entry points that serve MCP; the SDK is loaded then.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
import msgspec
import trio
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError

from bridge import __version__
from bridge.codecs.numbers import small_int
from bridge.config import Config
from bridge.core.identity import ANONYMOUS, Identity, of_scope
from bridge.fronts import owners
from bridge.fronts.mcp.config import McpFrontConfig
from bridge.errors import PromptError
from bridge.fronts.mcp import tools as mcp_tools
from bridge.prompts.mcp_source import ndjson_transport
from bridge.prompts.text import Command, hint_of, render_template
from bridge.session import SessionManager

__all__ = ["McpFront", "serve_mcp_stdio"]

log = logging.getLogger("bridge.fronts.mcp.front")

_PAGE = 100
_MAX_VALUES = 100  # completion values per answer (MCP 2025-11-25, Completion: at most 100)
_SETTLE_S = 10.0  # a first prompts/list waits this long at most for sources still starting


class _BridgeServer(Server[Any]):
    """The SDK's server, advertising `listChanged` for prompts and tools.

    Its Streamable HTTP session manager builds the `initialize` result from
    `create_initialization_options()` with no arguments (DESIGN.md, rough edges), so
    the default has to say what this server does.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(prompts_changed=True, tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class McpFront:
    """One per process; shared by every MCP connection (HTTP sessions and stdio)."""

    def __init__(self, config: Config, manager: SessionManager) -> None:
        self.config = config
        self.manager = manager
        self.local: Identity = ANONYMOUS  # who a request without HTTP is (serve_mcp_stdio: the process's user)
        self.server = self._build()
        self._peers: dict[int, Any] = {}  # connection id → a ServerSession on it (for notifications)
        self._changed = trio.Event()
        self._sent: tuple[Any, Any] | None = None  # the prompt and tool lists last announced
        self._unlisten: Callable[[], None] | None = None

    def _build(self) -> _BridgeServer:
        server = _BridgeServer(
            "agent-bridge",
            version=__version__,
            title="agent-bridge",
            description="Prompts of every configured source and template; every route as a tool.",
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # Our only middleware: it remembers each initialized connection so that
        # list_changed can reach it (the SDK's OpenTelemetry one does nothing here).
        server.middleware = [self._track]
        return server

    # -- connections and list_changed ----------------------------------------------------
    async def _track(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        # The SDK gives handlers a per-request ServerSession; its non-request-scoped
        # notifications go out on the connection's standalone channel (the GET
        # stream, or stdout). It exposes the connection only privately.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None and id(connection) not in self._peers:
            initialized = connection.initialized.is_set() or ctx.method == "notifications/initialized"
            if initialized:
                key = id(connection)
                self._peers[key] = ctx.session
                connection.exit_stack.callback(self._peers.pop, key, None)
        return await call_next(ctx)

    async def run_notifier(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send list_changed to every connection when the prompts or tools change; runs
        for the front's lifetime (in the HTTP engine's or the stdio server's nursery)."""
        self._sent = self._lists()
        self._unlisten = self.manager.prompts.listen(None, lambda: self._changed.set())
        task_status.started()
        try:
            while True:
                await self._changed.wait()
                self._changed = trio.Event()
                lists = self._lists()
                prompts_changed, tools_changed = lists[0] != self._sent[0], lists[1] != self._sent[1]
                self._sent = lists
                for session in list(self._peers.values()):
                    with trio.move_on_after(5):
                        if prompts_changed:
                            await session.send_prompt_list_changed()
                        if tools_changed:
                            await session.send_tool_list_changed()
        finally:
            if self._unlisten is not None:
                self._unlisten()

    def _lists(self) -> tuple[Any, Any]:
        prompts = [(c.name, c.spec) for c in self.manager.prompts.prompts().values()]
        tools = [(t.name, t.description) for t in mcp_tools.tools(self.manager.config)] if self._tools_on else []
        return prompts, tools

    @property
    def _tools_on(self) -> bool:
        return self.config.section(McpFrontConfig).tools

    # -- prompts ------------------------------------------------------------------------
    def _prompt(self, command: Command) -> types.Prompt:
        source = command.provider.source
        listed = self.manager.prompts.source(source).prompts.get(command.spec.name) if source else None
        if listed is not None:
            return listed if listed.name == command.name else listed.model_copy(update={"name": command.name})
        spec = command.spec
        return types.Prompt(
            name=command.name,
            title=spec.title,
            description=spec.description or spec.title or f"/{command.name} {hint_of(spec) or ''}".strip(),
            arguments=[
                types.PromptArgument(name=a.name, title=a.title, description=a.description, required=a.required)
                for a in spec.arguments
            ]
            or None,
        )

    async def _list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        registry = self.manager.prompts
        await registry.settle(_SETTLE_S)
        commands = list(registry.prompts().values())
        start = _offset(params.cursor if params is not None else None, len(commands))
        page = commands[start : start + _PAGE]
        nxt = str(start + _PAGE) if start + _PAGE < len(commands) else None
        return types.ListPromptsResult(prompts=[self._prompt(c) for c in page], next_cursor=nxt)

    def _command(self, name: str) -> Command:
        command = self.manager.prompts.prompts().get(name)
        if command is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {name!r}")
        return command

    async def _get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        await self.manager.prompts.settle(_SETTLE_S)
        command = self._command(params.name)
        arguments = params.arguments or {}
        template = self.manager.prompts.template_of(command)
        if template is not None:
            missing = [a.name for a in template.arguments if a.required and a.name not in arguments]
            if missing:
                raise MCPError(types.INVALID_PARAMS, f"prompt {command.name!r}: missing required argument(s) {', '.join(missing)}")
            messages = [
                types.PromptMessage.model_validate({"role": role, "content": msgspec.to_builtins(block)})
                for role, block in render_template(template, arguments)
            ]
            return types.GetPromptResult(description=template.description or None, messages=messages)
        source = self.manager.prompts.source(command.provider.source or "")
        if source is None:
            raise MCPError(types.INTERNAL_ERROR, f"prompt source {command.provider.source} is not running")
        try:
            return await source.get(command.spec.name, arguments)
        except PromptError as exc:
            raise _mapped(exc) from exc

    async def _complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        if not isinstance(ref, types.PromptReference):
            raise MCPError(types.INVALID_PARAMS, "this server has no resource templates; complete prompt arguments (ref/prompt)")
        command = self._command(ref.name)
        argument, value = params.argument.name, params.argument.value
        template = self.manager.prompts.template_of(command)
        if template is not None:
            declared = next((a for a in template.arguments if a.name == argument), None)
            if declared is None:
                raise MCPError(types.INVALID_PARAMS, f"prompt {command.name!r} has no argument {argument!r}")
            values = [v for v in declared.values if v.startswith(value)]
            completion = types.Completion(values=values[:_MAX_VALUES], total=len(values), has_more=len(values) > _MAX_VALUES)
            return types.CompleteResult(completion=completion)
        source = self.manager.prompts.source(command.provider.source or "")
        if source is None:
            return types.CompleteResult(completion=types.Completion(values=[]))
        context = params.context.arguments if params.context is not None else None
        try:
            return types.CompleteResult(completion=await source.complete(command.spec.name, argument, value, context))
        except PromptError as exc:
            raise _mapped(exc) from exc

    # -- tools ----------------------------------------------------------------------------
    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools.tools(self.manager.config, self._caller(ctx)) if self._tools_on else [])

    def _caller(self, ctx: Any) -> Identity:
        """The caller HttpApp authenticated, in the ASGI scope the SDK's request carries;
        over stdio (no HTTP request), the user who started this process (`local`)."""
        scope = getattr(getattr(ctx, "request", None), "scope", None)
        return of_scope(scope) if isinstance(scope, dict) else self.local

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        who = self._caller(ctx)
        if not self._tools_on or not owners.usable(self.manager.config, who, params.name):  # as tools/list shows them
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
        interval = self.config.section(McpFrontConfig).progress_interval_s
        return await mcp_tools.call(self.manager, params.name, params.arguments or {}, ctx, interval, who)


def _offset(cursor: str | None, total: int) -> int:
    if cursor is None:
        return 0
    offset = small_int(cursor)  # not str.isdigit(): "²" passes it and int() refuses it
    if offset is None or offset > total:
        raise MCPError(types.INVALID_PARAMS, f"invalid cursor {cursor!r}")
    return offset


def _mapped(exc: PromptError) -> MCPError:
    """A source's refusal by meaning (STYLE.md rule 9): its invalid params stay invalid
    params for our client; anything else is our failure to get the prompt."""
    code = exc.data.get("code") if isinstance(exc.data, dict) else None
    return MCPError(types.INVALID_PARAMS if code == types.INVALID_PARAMS else types.INTERNAL_ERROR, exc.message)


# -- stdio: `agent-bridge mcp` --------------------------------------------------------------


async def serve_mcp_stdio(config: Config, manager: SessionManager, stdin_fd: int, stdout_fd: int) -> None:
    """Serve MCP on a pair of file descriptors until the client closes its end.

    Newline-delimited JSON-RPC (MCP 2025-11-25, Transports: stdio) read and written with trio on the
    descriptors themselves (`ndjson_transport`), not through the SDK's thread-backed
    stdio files, so a signal or the end of the process never waits for a blocked read.
    """
    front = McpFront(config, manager)
    front.local = owners.unix_identity(os.getuid())  # as `agent-bridge acp` over stdio: the editor's user
    receive = trio.lowlevel.FdStream(stdin_fd)
    send = trio.lowlevel.FdStream(stdout_fd)
    async with ndjson_transport(receive, send, answer_parse_errors=True) as (reads, writes), trio.open_nursery() as nursery:
        await nursery.start(front.run_notifier)
        await front.server.run(reads, writes, front.server.create_initialization_options())
        nursery.cancel_scope.cancel()
