"""One MCP server as a prompt source, through the official `mcp` SDK (on trio via anyio).

Imported only when a configured source needs it (the SDK costs ~0.75 s to import).

`McpSource.run()` keeps one connection up: start the server (`command`, stdio) or
reach it (`url`, Streamable HTTP), `initialize` at revision 2025-11-25 (the SDK's
"legacy" handshake mode), list every page of `prompts/list`, then re-list on each
`notifications/prompts/list_changed` (MCP 2025-11-25, Server:
Prompts; Utilities: Pagination). When the connection
ends or fails, the source offers no prompts until it is back, and it is retried with
backoff (`retry_initial_s`, doubled up to `retry_max_s`). A source never fails its
route: its failure is logged and its commands come back with it.

A stdio server is this bridge's own child (bridge/prompts/stdio.py), read and written
with trio; the SDK gets its messages as a transport. The end of a connection is
noticed at once when that read stream ends (a stdio server exits, an HTTP stream
closes) and, for a server that goes silent, by a ping every `ping_interval_s`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
import msgspec
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from bridge import __version__
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.core.content import ContentBlock
from bridge.errors import BackError, PromptError
from bridge.prompts import stdio
from bridge.prompts.mcp_auth import OAuthFlow
from bridge.prompts.config import PromptSource
from bridge.prompts.text import PromptArg, PromptSpec, Role
from bridge.transport.ndjson import receive_frames
from bridge.transport.oauth import OAuthClient

__all__ = ["McpSource", "ndjson_transport", "to_messages"]

log = logging.getLogger("bridge.prompts")
# One line per HTTP request or SDK session is noise at INFO: our own lines say what happens.
logging.getLogger("httpx2").setLevel(logging.WARNING)
logging.getLogger("mcp").setLevel(logging.WARNING)

MAX_LINE_BYTES = 8 * 1024 * 1024  # one stdio JSON-RPC line at most (DESIGN.md: frames are bounded)
_MAX_PAGES = 1000  # a server whose cursor never ends cannot hang a listing
_FOREIGN = (MCPError, ValidationError, httpx2.HTTPError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def _spec(prompt: types.Prompt) -> PromptSpec:
    return PromptSpec(
        name=prompt.name,
        description=prompt.description,
        title=prompt.title,
        arguments=tuple(
            PromptArg(name=a.name, description=a.description, title=a.title, required=bool(a.required))
            for a in prompt.arguments or ()
        ),
    )


def to_messages(result: types.GetPromptResult) -> list[tuple[Role, ContentBlock]]:
    """A `prompts/get` result's messages as canonical content blocks."""
    out: list[tuple[Role, ContentBlock]] = []
    for message in result.messages:
        raw = message.content.model_dump(by_alias=True, mode="json", exclude_none=True)
        out.append((message.role, msgspec.convert(raw, ContentBlock)))  # type: ignore[arg-type]
    return out


class _WatchedRead:
    """The transport's read stream, telling `closed` when it ends (EOF or closed)."""

    def __init__(self, inner: Any, closed: trio.Event) -> None:
        self._inner = inner
        self._closed = closed

    def __getattr__(self, name: str) -> Any:  # `last_context` and the like
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._closed.set()
            raise

    async def aclose(self) -> None:
        self._closed.set()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError):
            self._closed.set()
            raise

    async def __aenter__(self) -> _WatchedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        self._closed.set()
        return await self._inner.__aexit__(*exc)


@contextlib.asynccontextmanager
async def _watched(transport: Any, closed: trio.Event) -> AsyncIterator[Any]:
    async with transport as (read, write):
        yield _WatchedRead(read, closed), write


def _not_json(exc: ValueError) -> bool:
    return isinstance(exc, ValidationError) and any(e["type"] == "json_invalid" for e in exc.errors())


@contextlib.asynccontextmanager
async def ndjson_transport(
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
    *,
    answer_parse_errors: bool = False,
    max_frame_bytes: int = MAX_LINE_BYTES,
) -> AsyncIterator[Any]:
    """A byte stream pair as the SDK's (read, write) message streams: one JSON-RPC message
    per line (MCP 2025-11-25, Transports: stdio), read and written with trio. A line that is not
    JSON-RPC reaches the SDK as an error (it answers or logs it); the writer sends
    everything already waiting in one write (STYLE.md rule 13). Used for a stdio
    source's pipes and for `agent-bridge mcp`'s stdin/stdout. A line over
    `max_frame_bytes` is dropped as it streams in (memory stays bounded) and reaches the
    SDK as an error; a server answers it with -32600 and a null id."""
    to_sdk, reads = anyio.create_memory_object_stream[Any](64)
    writes, from_sdk = anyio.create_memory_object_stream[Any](64)
    # A server answers a line that is not JSON with -32700 and a null id (JSON-RPC 2.0
    # §5); the SDK only logs it. A client (a stdio source) does not answer its server.
    to_peer = writes.clone() if answer_parse_errors else None

    async def reader() -> None:
        framer = LineReader(max_frame_bytes)
        async with to_sdk, to_peer if to_peer is not None else contextlib.nullcontext():
            while True:
                frames, ended = await receive_frames(receive, framer)
                for line in frames:
                    if isinstance(line, Oversized):
                        too_big = f"a line over {max_frame_bytes} bytes was dropped"
                        if to_peer is not None:
                            error = types.ErrorData(code=types.INVALID_REQUEST, message=too_big)
                            await to_peer.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))
                        await to_sdk.send(ValueError(too_big))
                    elif line.strip():
                        try:
                            item: Any = SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
                        except ValueError as exc:
                            item = exc
                            if to_peer is not None and _not_json(exc):
                                error = types.ErrorData(code=types.PARSE_ERROR, message=f"Parse error: {exc.errors()[0]['msg']}")  # type: ignore[attr-defined]
                                await to_peer.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))
                        await to_sdk.send(item)
                if ended:
                    return

    async def writer() -> None:
        async with from_sdk:
            async for message in from_sdk:
                out = [message]
                while True:
                    try:
                        out.append(from_sdk.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                body = b"".join(m.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n" for m in out)
                try:
                    await send.send_all(body)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        yield reads, writes
        nursery.cancel_scope.cancel()


class McpSource:
    """A configured MCP server; `specs` are its prompts while it is up, () otherwise."""

    def __init__(self, cfg: PromptSource, on_change: Callable[[McpSource], None]) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self._on_change = on_change
        self.specs: tuple[PromptSpec, ...] = ()
        self.prompts: dict[str, types.Prompt] = {}  # as listed, for the MCP front
        self.completions = False
        self.server: str | None = None  # "name version" from its initialize result, once connected
        self.up = False
        self.why = "starting"
        self.settled = trio.Event()  # set once the first attempt has listed or failed
        self._client: Client | None = None
        self._relist = trio.Event()
        self._http_status: int | None = None  # the last HTTP error status (for the log line)
        # `oauth`: the source's access token, shared by its connections (bridge/transport/oauth.py).
        self.oauth = OAuthClient(cfg.oauth, name=f"prompt source {cfg.name}") if cfg.oauth is not None else None

    def __repr__(self) -> str:
        return f"McpSource({self.name!r}, up={self.up})"

    # -- the connection --------------------------------------------------------------
    async def run(self, *, process: trio.Process | None = None) -> None:
        """Keep a connection up until cancelled; `process`: the stdio server, already started."""
        try:
            await self._keep_up(process)
        finally:
            if self.oauth is not None:
                with trio.move_on_after(1, shield=True):
                    await self.oauth.aclose()

    async def _keep_up(self, process: trio.Process | None) -> None:
        delay = self.cfg.retry_initial_s
        while True:
            started = trio.current_time()
            try:
                await self._connect_once(process)
                why = "the server closed the connection"
            except Exception as exc:  # the connection boundary: one source never fails its route
                why = _describe(exc)
            if self._http_status is not None:
                why += f" (HTTP {self._http_status})"
            process = None
            up_for = trio.current_time() - started
            self._down(why)
            if up_for > delay:
                delay = self.cfg.retry_initial_s  # it worked for a while: start over
            log.warning("prompt source %s: %s; no commands from it until it is up (retry in %g s)", self.name, why, delay)
            await trio.sleep(delay)
            delay = min(delay * 2, self.cfg.retry_max_s)

    async def _connect_once(self, process: trio.Process | None) -> None:
        cfg = self.cfg
        self._http_status = None
        if cfg.url is not None:
            headers = {k: stdio.secret(v, f"prompt source {cfg.name}: header {k}") for k, v in cfg.headers.items()}
            auth = OAuthFlow(self.oauth) if self.oauth is not None else None
            await self._session(_http_transport(cfg.url, headers, cfg.request_timeout_s, self._saw_status, auth))
            return
        async with trio.open_nursery() as nursery:
            if process is None:
                process = await stdio.spawn(cfg, nursery)
            try:
                assert process.stdout is not None and process.stdin is not None
                await self._session(ndjson_transport(process.stdout, process.stdin))
            finally:
                await stdio.stop(process)

    async def _session(self, transport: Any) -> None:
        closed = trio.Event()
        self._relist = trio.Event()
        with trio.CancelScope(deadline=trio.current_time() + self.cfg.connect_timeout_s) as starting:
            client = Client(
                _watched(transport, closed),  # type: ignore[arg-type]
                mode="legacy",  # the initialize handshake: revision 2025-11-25
                cache=None,
                message_handler=self._on_message,
                client_info=types.Implementation(name="agent-bridge", version=__version__),
                read_timeout_seconds=self.cfg.request_timeout_s,
            )
            async with client:
                info = client.server_info
                self.server = " ".join(v for v in (info.name, info.version) if v) if info is not None else None
                caps = client.server_capabilities
                if caps.prompts is None:
                    log.warning("prompt source %s offers no prompts (no prompts capability)", self.name)
                self.completions = caps.completions is not None
                await self._list(client)
                starting.deadline = math.inf
                self._client, self.up, self.why = client, True, "up"
                self.settled.set()
                log.info("prompt source %s: %d prompts", self.name, len(self.specs))
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._relister, client)
                        if self.cfg.ping_interval_s is not None:
                            nursery.start_soon(self._pinger, client)
                        await closed.wait()
                        nursery.cancel_scope.cancel()
                finally:
                    self._client = None
        if starting.cancelled_caught:
            raise PromptError(f"no answer within connect_timeout_s ({self.cfg.connect_timeout_s:g} s)")

    def _saw_status(self, status: int) -> None:
        self._http_status = status if status >= 400 else None

    def _down(self, why: str) -> None:
        self.up, self.why, self._client = False, why, None
        self.settled.set()
        if self.specs:
            self.specs, self.prompts = (), {}
            self._on_change(self)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.PromptListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            log.debug("prompt source %s: transport: %s", self.name, message)

    async def _relister(self, client: Client) -> None:
        while True:
            await self._relist.wait()
            self._relist = trio.Event()  # a notice during the listing lists again
            await self._list(client)

    async def _pinger(self, client: Client) -> None:
        assert self.cfg.ping_interval_s is not None
        while True:
            await trio.sleep(self.cfg.ping_interval_s)
            with trio.fail_after(self.cfg.request_timeout_s):
                await client.session.send_ping()

    async def _list(self, client: Client) -> None:
        """Every page of prompts/list; listeners hear of it when something changed."""
        prompts: dict[str, types.Prompt] = {}
        if client.server_capabilities.prompts is not None:
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_prompts(cursor=cursor)
                for prompt in page.prompts:
                    prompts.setdefault(prompt.name, prompt)
                cursor = page.next_cursor
                if not cursor:
                    break
            else:
                log.warning("prompt source %s: still paging after %d pages; listing cut short", self.name, _MAX_PAGES)
        specs = tuple(_spec(p) for p in prompts.values())
        self.prompts = prompts
        if specs != self.specs:
            self.specs = specs
            self._on_change(self)

    # -- requests ----------------------------------------------------------------------
    def _connected(self) -> Client:
        if self._client is None:
            raise PromptError(f"prompt source {self.name} is not connected ({self.why})")
        return self._client

    async def get(self, name: str, arguments: dict[str, str], *, meta: dict[str, str] | None = None) -> types.GetPromptResult:
        """`prompts/get`; PromptError with the server's message when it refuses. `meta`:
        the turn's `traceparent` / `tracestate` (MCP SEP-414: W3C Trace Context in `_meta`)."""
        client = self._connected()
        try:
            with trio.fail_after(self.cfg.request_timeout_s):
                return await client.get_prompt(name, arguments, meta=meta)  # type: ignore[arg-type]
        except trio.TooSlowError as exc:
            raise PromptError(f"prompt source {self.name} did not answer within {self.cfg.request_timeout_s:g} s") from exc
        except _FOREIGN as exc:
            raise PromptError(f"prompt source {self.name}: {_describe(exc)}", data=_error_data(exc)) from exc

    async def complete(self, name: str, argument: str, value: str, context: dict[str, str] | None) -> types.Completion:
        """`completion/complete` for one of its prompts; nothing when it has no completions."""
        if not self.completions:
            return types.Completion(values=[])
        client = self._connected()
        try:
            with trio.fail_after(self.cfg.request_timeout_s):
                result = await client.complete(
                    types.PromptReference(name=name), {"name": argument, "value": value}, context_arguments=context
                )
        except trio.TooSlowError as exc:
            raise PromptError(f"prompt source {self.name} did not answer within {self.cfg.request_timeout_s:g} s") from exc
        except _FOREIGN as exc:
            raise PromptError(f"prompt source {self.name}: {_describe(exc)}", data=_error_data(exc)) from exc
        return result.completion


@contextlib.asynccontextmanager
async def _http_transport(
    url: str, headers: dict[str, str], timeout_s: float, saw_status: Callable[[int], None], auth: httpx2.Auth | None = None
) -> AsyncIterator[Any]:
    async def on_response(response: httpx2.Response) -> None:
        saw_status(response.status_code)  # the SDK's own error says only "an error response"

    http = create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(timeout_s, read=None), auth=auth)
    http.event_hooks["response"].append(on_response)
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


def _error_data(exc: BaseException) -> Any:
    return {"code": exc.code} if isinstance(exc, MCPError) else None


def _describe(exc: BaseException) -> str:
    """One line for a failure: the innermost meaningful exception of a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        exc = inner[0] if inner else exc.exceptions[0]
    if isinstance(exc, (MCPError, BackError)):  # PromptError, and an OAuth token that could not be had
        return exc.message
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, OSError) else text
