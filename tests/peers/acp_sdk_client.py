"""An ACP editor built from the official Python SDK (`agent-client-protocol`), run as a script.

    python acp_sdk_client.py SCENARIO OPTIONS_JSON BRIDGE_CMD...

It spawns BRIDGE_CMD with `acp.spawn_agent_process`, runs the named scenario, and
prints one JSON report on stdout:

- `wire`: every JSON-RPC message, in wire order, as `{"dir": "in"|"out", "msg": ...}`
  (recorded by a stream observer, which the SDK calls synchronously from its reader,
  so the order is the order of the bytes);
- `updates`: every `session/update` the SDK parsed and handed to the `Client`
  (dumped from the SDK's own pydantic models: proof the bridge's output validates);
- `permissions`: every `session/request_permission` and what we answered;
- `results`: named results or errors (`{"error": {"code", "message", "data"}}`);
- `sdk_log`: anything the SDK logged at WARNING or above (a handler that raised,
  an update that did not validate): the tests expect it empty.

The SDK is asyncio-only; the tests run under trio, which is why this is a separate
process. The bridge's stderr goes to OPTIONS_JSON["stderr"] (a file), so a chatty
bridge never blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import acp
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    RequestPermissionResponse,
)

Scenario = Callable[["Editor"], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


class _LogTrap(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {record.exc_info[1]!r}"
        self.sink.append(text)


def _dump(model: Any) -> Any:
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RequestError):
        return {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}
    return {"error": {"code": None, "message": f"{type(exc).__name__}: {exc}", "data": None}}


class Editor:
    """The `Client` side: records what arrives and answers permission requests by policy."""

    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = opts
        self.report: dict[str, Any] = {"wire": [], "updates": [], "permissions": [], "results": {}, "sdk_log": []}
        self.conn: Any = None
        self.process: Any = None
        self.cwd = opts.get("cwd") or os.getcwd()
        # "allow", "reject", or an async callable(editor, params) -> RequestPermissionResponse
        self.on_permission: Any = "allow"
        self._changed = asyncio.Event()

    # -- acp.Client ---------------------------------------------------------------------
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.report["updates"].append({"sessionId": session_id, "update": _dump(update)})
        self._poke()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        record = {
            "sessionId": session_id,
            "toolCall": _dump(tool_call),
            "options": [_dump(o) for o in options],
        }
        self.report["permissions"].append(record)
        self._poke()
        policy = self.on_permission
        if callable(policy):
            response = await policy(self, session_id, options)
        else:
            wanted = "allow_once" if policy == "allow" else "reject_once"
            chosen = next(o for o in options if o.kind == wanted)
            response = RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))
        record["answer"] = _dump(response)
        return response

    # The bridge must not ask for what we did not advertise (no fs, no terminal).
    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    def on_connect(self, conn: Any) -> None:
        pass

    # -- helpers ------------------------------------------------------------------------
    def _observe(self, event: Any) -> None:
        self.report["wire"].append({"dir": "in" if event.direction.value == "incoming" else "out", "msg": event.message})
        self._poke()

    def _poke(self) -> None:
        self._changed.set()

    async def wait_for(self, pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def updates_of(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            u["update"]
            for u in self.report["updates"]
            if u["sessionId"] == session_id and (kind is None or u["update"].get("sessionUpdate") == kind)
        ]

    async def call(self, name: str, coro: Awaitable[Any]) -> Any:
        """Await a request; record its result (or its error) under `name`."""
        try:
            result = await coro
        except Exception as exc:  # noqa: BLE001 - the error IS the result we report
            self.report["results"][name] = _error(exc)
            return None
        self.report["results"][name] = {"result": _dump(result) if hasattr(result, "model_dump") else result}
        return result

    async def init(self) -> Any:
        return await self.call(
            "initialize",
            self.conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_info=acp.schema.Implementation(name="acp-sdk-test-client", version="1.0"),
            ),
        )

    async def new(self, name: str = "new", cwd: str | None = None) -> str:
        res = await self.call(name, self.conn.new_session(cwd=cwd or self.cwd, mcp_servers=[]))
        assert res is not None, self.report["results"][name]
        return res.session_id

    async def prompt(self, name: str, session_id: str, text: str) -> Any:
        return await self.call(name, self.conn.prompt(session_id=session_id, prompt=[text_block(text)]))


# -- scenarios ---------------------------------------------------------------------------


@scenario
async def full(ed: Editor) -> None:
    """initialize → session/new → commands → "all: hello" with the permission allowed."""
    await ed.init()
    sid = await ed.new()
    await ed.wait_for(lambda: ed.updates_of(sid, "available_commands_update"), what="available_commands_update")
    ed.on_permission = "allow"
    await ed.prompt("prompt", sid, "all: hello")


@scenario
async def reject(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()
    ed.on_permission = "reject"
    await ed.prompt("prompt", sid, "ask: x")
    # The session is still usable after a rejection.
    await ed.prompt("after", sid, "hello again")


@scenario
async def cancel_stream(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()
    turn = asyncio.ensure_future(ed.prompt("prompt", sid, "slow: x"))
    await ed.wait_for(lambda: len(ed.updates_of(sid, "agent_message_chunk")) >= 3, what="three chunks")
    ed.report["chunks_before_cancel"] = len(ed.updates_of(sid, "agent_message_chunk"))
    t0 = time.monotonic()
    await ed.conn.cancel(session_id=sid)
    await turn
    ed.report["cancel_to_answer_s"] = time.monotonic() - t0
    # The session serves the next prompt normally.
    await ed.prompt("after", sid, "hello again")


@scenario
async def watched(ed: Editor) -> None:
    """A `slow:` turn that someone else (the web console) watches and cancels."""
    await ed.init()
    sid = await ed.new()
    ed.report["session_id"] = sid
    await ed.prompt("prompt", sid, "slow: watched from a browser")


@scenario
async def cancel_permission(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()

    async def cancel_then_answer(ed: Editor, session_id: str, options: list[Any]) -> RequestPermissionResponse:
        # ACP §cancellation: send session/cancel, then answer pending requests `cancelled`.
        await ed.conn.cancel(session_id=session_id)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    ed.on_permission = cancel_then_answer
    t0 = time.monotonic()
    await ed.prompt("prompt", sid, "ask: x")
    ed.report["elapsed_s"] = time.monotonic() - t0


@scenario
async def persist_write(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()
    ed.report["session_id"] = sid
    await ed.prompt("prompt1", sid, "first prompt")
    await ed.prompt("prompt2", sid, "tool: second prompt")


@scenario
async def persist_read(ed: Editor) -> None:
    sid = ed.opts["session_id"]
    await ed.init()
    await ed.call("list", ed.conn.list_sessions(cwd=ed.cwd))
    await ed.call("load", ed.conn.load_session(cwd=ed.cwd, session_id=sid, mcp_servers=[]))
    ed.report["updates_at_load_return"] = len(ed.updates_of(sid))
    await ed.prompt("prompt3", sid, "third prompt")


@scenario
async def stop_reasons(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()
    for word in ("fail", "refuse", "max_tokens", "max_turns"):
        await ed.prompt(word, sid, f"{word}: x")
    await ed.prompt("after", sid, "hello")


@scenario
async def options(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()
    ed.report["session_id"] = sid
    await ed.call("set_mode", ed.conn.set_session_mode(session_id=sid, mode_id="ask"))
    await ed.wait_for(lambda: ed.updates_of(sid, "config_option_update"), what="config_option_update")
    await ed.call("set_option", ed.conn.set_config_option(config_id="mode", session_id=sid, value="code"))
    await ed.wait_for(lambda: len(ed.updates_of(sid, "config_option_update")) >= 2, what="second config_option_update")
    await ed.call("bad_value", ed.conn.set_config_option(config_id="mode", session_id=sid, value="nonsense"))
    await ed.call("bad_mode", ed.conn.set_session_mode(session_id=sid, mode_id="nonsense"))
    await ed.call("bad_id", ed.conn.set_config_option(config_id="no_such_option", session_id=sid, value="ask"))
    await ed.call("bool_value", ed.conn.set_config_option(config_id="mode", session_id=sid, value=True))
    # The option sticks: a session loaded again reports it.
    await ed.call("set_ask", ed.conn.set_config_option(config_id="mode", session_id=sid, value="ask"))
    await ed.call("reload", ed.conn.load_session(cwd=ed.cwd, session_id=sid, mcp_servers=[]))


@scenario
async def busy(ed: Editor) -> None:
    await ed.init()
    sid = await ed.new()

    async def second_prompt_then_allow(ed: Editor, session_id: str, options: list[Any]) -> RequestPermissionResponse:
        # The first turn is parked on this very question: it is certainly still running.
        await ed.prompt("second", session_id, "hello")
        chosen = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    ed.on_permission = second_prompt_then_allow
    await ed.prompt("first", sid, "ask: x")


@scenario
async def close_and_list(ed: Editor) -> None:
    await ed.init()
    other = os.path.join(ed.cwd, "other")
    closed = await ed.new("closed_new", cwd=other)
    ed.report["closed_id"] = closed
    await ed.call("close", ed.conn.close_session(session_id=closed))
    await ed.prompt("prompt_closed", closed, "hello")
    await ed.call("close_again", ed.conn.close_session(session_id=closed))
    created = []
    for i in range(int(ed.opts.get("sessions", 55))):
        created.append(await ed.new(f"new{i}"))
    ed.report["created"] = created
    pages: list[list[str]] = []
    cursor = None
    while True:
        res = await ed.call(f"list{len(pages)}", ed.conn.list_sessions(cwd=ed.cwd, cursor=cursor))
        if res is None:
            break
        pages.append([s.session_id for s in res.sessions])
        cursor = res.next_cursor
        if not cursor or len(pages) > 10:
            break
    ed.report["pages"] = pages
    await ed.call("bad_cursor", ed.conn.list_sessions(cursor="!!not-a-cursor!!"))


@scenario
async def fidelity(ed: Editor) -> None:
    """Issue 15 on the ACP front: an editor that declares forms but answers
    elicitation/create -32601 (this SDK without its unstable methods), picks permission
    options by kind, lists and reloads its session."""
    forms = ClientCapabilities(elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()))
    await ed.call("initialize", ed.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=forms))
    sid = await ed.new()
    ed.report["session_id"] = sid
    await ed.call("two_blocks", ed.conn.prompt(session_id=sid, prompt=[text_block("hello"), text_block("second message")]))
    await ed.prompt("kinds", sid, "progress: data: image: hello")

    def by(pred: Callable[[Any], bool]) -> Any:
        async def answer(ed: Editor, session_id: str, options: list[Any]) -> RequestPermissionResponse:
            chosen = next(o for o in options if pred(o))
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

        return answer

    ed.on_permission = by(lambda o: o.kind == "reject_always")
    await ed.prompt("never", sid, "ask: x")
    ed.on_permission = by(lambda o: o.name == "Red")
    await ed.prompt("choose", sid, "choose: hello")
    await ed.prompt("choose_again", sid, "choose: again")
    await ed.call("list", ed.conn.list_sessions(cwd=ed.cwd))
    await ed.call("load", ed.conn.load_session(cwd=ed.cwd, session_id=sid, mcp_servers=[]))


async def main() -> int:
    name, opts_json, *command = sys.argv[1:]
    opts = json.loads(opts_json)
    ed = Editor(opts)
    logging.getLogger().addHandler(_LogTrap(ed.report["sdk_log"]))
    stderr = open(opts["stderr"], "ab") if opts.get("stderr") else None  # noqa: SIM115
    t0 = time.monotonic()
    try:
        async with spawn_agent_process(
            ed,
            command[0],
            *command[1:],
            env=dict(os.environ),
            cwd=ed.cwd,
            transport_kwargs={"stderr": stderr} if stderr else None,
            observers=[ed._observe],
        ) as (conn, process):
            ed.conn, ed.process = conn, process
            await asyncio.wait_for(SCENARIOS[name](ed), opts.get("timeout_s", 30))
        # Leaving the block closed the bridge's stdin: it must exit on its own, cleanly.
        ed.report["bridge_returncode"] = process.returncode
    except Exception as exc:  # noqa: BLE001 - reported, the test decides
        ed.report["crash"] = f"{type(exc).__name__}: {exc}"
    finally:
        if stderr:
            stderr.close()
    ed.report["elapsed_s_total"] = time.monotonic() - t0
    json.dump(ed.report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
