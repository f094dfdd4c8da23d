"""A prompts server built with the official `mcp` SDK (low-level Server), for tests and bench.

    python mcp_prompts_server.py CONTROL.json [--http PORT]

Its prompts come from the control file, a JSON object, re-read every 50 ms:

    {"prompts": [{"name", "description", "arguments": [{"name", "required", "values"}],
                  "text": "... {arg} ...", "assistant": "..."}],
     "exit": "token"}

When the prompt list in the file changes, the server sends
`notifications/prompts/list_changed` on every initialized connection. When `exit`
differs from its value when the server started, the server exits (status 3): the
bridge then restarts it, and the new process takes the new value as its own.
`prompts/list` pages two prompts at a time (every page must be read). Completion:
an argument's `values` that start with what was typed. stdio by default; `--http
PORT` serves Streamable HTTP on 127.0.0.1:PORT/mcp instead (0: any, printed on
stderr as `LISTENING <port>`); with $PROMPTS_TOKEN set, HTTP requests need
`Authorization: Bearer $PROMPTS_TOKEN` (401 otherwise); with $PROMPTS_INTROSPECT set
(an RFC 7662 endpoint), a bearer token that endpoint says is active. A prompt's text may
name `{_meta.traceparent}`: the `_meta.traceparent` of the `prompts/get` request.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PAGE = 2


def main() -> None:
    control = Path(sys.argv[1])
    http_port = int(sys.argv[sys.argv.index("--http") + 1]) if "--http" in sys.argv else None
    state: dict[str, Any] = {"doc": _read(control), "sessions": []}
    started_exit = state["doc"].get("exit")

    def prompts() -> list[dict[str, Any]]:
        return list(state["doc"].get("prompts", []))

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        items = prompts()
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = items[start : start + PAGE]
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name=p["name"],
                    description=p.get("description"),
                    arguments=[
                        types.PromptArgument(name=a["name"], description=a.get("description"), required=a.get("required", False))
                        for a in p.get("arguments", [])
                    ],
                )
                for p in page
            ],
            next_cursor=str(start + PAGE) if start + PAGE < len(items) else None,
        )

    def find(name: str) -> dict[str, Any]:
        for p in prompts():
            if p["name"] == name:
                return p
        raise MCPError(types.INVALID_PARAMS, f"no prompt named {name!r}")

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        p = find(params.name)
        args = params.arguments or {}
        for a in p.get("arguments", []):
            if a.get("required") and a["name"] not in args:
                raise MCPError(types.INVALID_PARAMS, f"missing required argument {a['name']!r}")
        text = p.get("text", "")
        for k, v in args.items():
            text = text.replace("{" + k + "}", v)
        # What the bridge sent as W3C trace context in `_meta` (MCP SEP-414), for the tracing tests.
        text = text.replace("{_meta.traceparent}", str((ctx.meta or {}).get("traceparent")))
        messages = [types.PromptMessage(role="user", content=types.TextContent(text=text))]
        if p.get("assistant"):
            messages.append(types.PromptMessage(role="assistant", content=types.TextContent(text=p["assistant"])))
        return types.GetPromptResult(description=p.get("description"), messages=messages)

    async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        values: list[str] = []
        if isinstance(params.ref, types.PromptReference):
            p = find(params.ref.name)
            for a in p.get("arguments", []):
                if a["name"] == params.argument.name:
                    values = [v for v in a.get("values", []) if v.startswith(params.argument.value)]
        return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))

    async def initialized(ctx: Any, params: Any) -> None:
        state["sessions"].append(ctx.session)

    server = Server(
        "test-prompts",
        version="1.0.0",
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
    )
    server.add_notification_handler("notifications/initialized", types.NotificationParams, initialized)
    options = server.create_initialization_options(NotificationOptions(prompts_changed=True))
    # The SDK's HTTP session manager asks for the options without arguments: say listChanged there too.
    server.create_initialization_options = lambda *a, **kw: options  # type: ignore[method-assign]

    async def watch() -> None:
        while True:
            await anyio.sleep(0.05)
            doc = _read(control)
            if doc.get("exit") != started_exit:
                os._exit(3)
            if doc.get("prompts") != state["doc"].get("prompts"):
                state["doc"] = doc
                for session in list(state["sessions"]):
                    try:
                        await session.send_prompt_list_changed()
                    except Exception:  # a connection that went away
                        state["sessions"].remove(session)
            state["doc"] = doc

    async def run_stdio() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with stdio_server() as (read, write):
                await server.run(read, write, options)
            tg.cancel_scope.cancel()

    async def run_http() -> None:
        import uvicorn

        inner = server.streamable_http_app(host="127.0.0.1")
        token = os.environ.get("PROMPTS_TOKEN")
        introspect = os.environ.get("PROMPTS_INTROSPECT")

        async def active(value: str) -> bool:
            import httpx

            scheme, _, given = value.partition(" ")
            if scheme.lower() != "bearer" or not given:
                return False
            async with httpx.AsyncClient(trust_env=False) as h:
                return bool((await h.post(introspect, data={"token": given})).json().get("active"))

        async def app(scope: Any, receive: Any, send: Any) -> None:
            # With $PROMPTS_TOKEN, every request needs `Authorization: Bearer <it>`.
            if token and scope["type"] == "http":
                got = dict(scope["headers"]).get(b"authorization", b"").decode()
                if got != f"Bearer {token}":
                    await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
                    await send({"type": "http.response.body", "body": b""})
                    return
            if introspect and scope["type"] == "http":
                if not await active(dict(scope["headers"]).get(b"authorization", b"").decode()):
                    await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
                    await send({"type": "http.response.body", "body": b""})
                    return
            await inner(scope, receive, send)
        config = uvicorn.Config(app, host="127.0.0.1", port=http_port or 0, log_level="warning")
        srv = uvicorn.Server(config)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            tg.start_soon(srv.serve)
            while not srv.started:
                await anyio.sleep(0.02)
            port = srv.servers[0].sockets[0].getsockname()[1]
            print(f"LISTENING {port}", file=sys.stderr, flush=True)

    anyio.run(run_http if http_port is not None else run_stdio)


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    main()
