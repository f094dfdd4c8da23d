"""A scriptable coding agent on the official ACP Python SDK (`agent-client-protocol`).

The bridge's ACP back spawns it (tests/test_e2e_acp_back.py). Words in the prompt,
run in order, say what it does; some misbehave on purpose:

    text:N      N agent_message_chunk updates ("c0 c1 ...")
    think       one thought chunk
    tool        a read tool call: pending → in_progress → completed
    ask/askread a tool call (edit / read) and session/request_permission with
                allow_once "allow", allow_always "always", reject_once "reject",
                its toolCall in full (title, kind, status, locations, rawInput,
                a diff); then the text "permission=<optionId|cancelled>"
    askfresh    the same about a tool call it never announced ("t3", execute)
    progress    a thought chunk marked `_meta.agentBridge.progress` ("Working on it.")
    traceparent says "traceparent=<the session/prompt's _meta.traceparent>" (W3C trace context)
    data        a message chunk holding JSON as an embedded `data:application/json`
                resource (DATA of tests/matrix/kinds.py)
    slow        a chunk every 50 ms for up to 30 s; honours session/cancel
    hang        never answers, ignores cancel
    crash       a chunk, then exits at once (code 3)
    child       starts `sleep 600` in its process group; says "child=<pid>"
    pid         says "pid=<pid>"
    noreason    answers session/prompt with {} (no stopReason)
    badreason   answers with stopReason "weird"
    late        answers, then sends a chunk 100 ms after its response
    garbage     writes a line that is not JSON on stdout, then goes on
    remember:W  keeps W (written to --state so a restarted agent can load it)
    recall      says "memory=<words>"
    read:PATH   fs/read_text_file; says "read=<content>" or "read-error=<code>"
    write:PATH  fs/write_text_file with "written by agent"; says "wrote" or "write-error=<code>"
    term:CMD    terminal/create (CMD split on ","), wait, output, release; says
                "term=<exitCode>|<truncated>|<output>" or "term-error=<code>"
    caps        says "caps=<clientCapabilities as JSON>"
    env:NAME    says "env:NAME=<value or -unset->"
    cwd         says "cwd=<process cwd>|<session cwd>"
    mcp         says "mcp=<names of the MCP servers of session/new>"
    usage       a usage_update
    setmode:M   switches its own mode (current_mode_update)
    commands    an available_commands_update
    big:N       one chunk of N bytes
    bench:N     N chunks "x" as fast as the SDK sends them (bench/acp_back.py)
    pace:N:MS   N chunks, one every MS ms, each "t=<CLOCK_MONOTONIC ns>" (latency)
    auth        says "auth=<the methodId of authenticate, or none>"
    model       says "model=<model>|mode=<mode>" (as set by set_config_option / set_mode)

Options: --protocol-version N, --load-session, --modes, --config, --commands (sent
right after session/new), --close (advertise session/close; each close leaves a file
`closed-<sessionId>` in --state), --state DIR, --tag T (ignored: marks the process for the
tests' process-table checks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import acp
from acp import RequestError, text_block, update_agent_message_text, update_agent_thought_text
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    TextResourceContents,
    ToolCallLocation,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

# What `data` sends (a copy of tests/matrix/kinds.py DATA): an int, a float, nesting, a null.
DATA = {"key": "value", "count": 42, "ratio": 0.5, "nested": {"ok": True, "none": None}}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol-version", type=int, default=None)
    ap.add_argument("--load-session", action="store_true")
    ap.add_argument("--modes", action="store_true")
    ap.add_argument("--config", action="store_true")
    ap.add_argument("--commands", action="store_true")
    ap.add_argument("--close", action="store_true")
    ap.add_argument("--state", default=None)
    ap.add_argument("--tag", default=None)
    return ap.parse_args()


class ScriptAgent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.conn: Any = None
        self.caps: Any = None
        self.sessions: dict[str, dict[str, Any]] = {}
        self.cancelled: dict[str, asyncio.Event] = {}
        self.next_id = 0
        self.authed = "none"

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    # -- setup ----------------------------------------------------------------------------
    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kw: Any) -> InitializeResponse:
        self.caps = client_capabilities
        version = self.args.protocol_version if self.args.protocol_version is not None else min(protocol_version, acp.PROTOCOL_VERSION)
        return InitializeResponse(
            protocol_version=version,
            agent_capabilities=AgentCapabilities(
                load_session=self.args.load_session,
                session_capabilities=SessionCapabilities(close=SessionCloseCapabilities() if self.args.close else None),
            ),
            agent_info=acp.schema.Implementation(name="script-agent", version="1.0.0"),
        )

    def _setup(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.args.modes:
            out["modes"] = SessionModeState(
                current_mode_id="code",
                available_modes=[SessionMode(id="ask", name="Ask"), SessionMode(id="code", name="Code")],
            )
        if self.args.config:
            out["config_options"] = [self._model_option("small")]
        return out

    def _model_option(self, current: str) -> SessionConfigOptionSelect:
        return SessionConfigOptionSelect(
            type="select",
            id="model",
            name="Model",
            category="model",
            current_value=current,
            options=[SessionConfigSelectOption(value="small", name="Small"), SessionConfigSelectOption(value="large", name="Large")],
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        self.next_id += 1
        sid = f"s{os.getpid()}-{self.next_id}"
        self.sessions[sid] = {"cwd": cwd, "memory": [], "mcp": [m.name for m in mcp_servers or []], "mode": "code"}
        self._save(sid)
        if self.args.commands:
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self._commands(sid)))
        return NewSessionResponse(session_id=sid, **self._setup())

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kw: Any) -> LoadSessionResponse:
        stored = self._load(session_id)
        if stored is None:
            raise RequestError.resource_not_found(session_id)
        self.sessions[session_id] = stored
        # Replay the history (ACP, Session Setup: `session/load` replays the history, then answers).
        for word in stored["memory"]:
            await self.conn.session_update(session_id, acp.update_user_message_text(f"remember:{word}"))
            await self.conn.session_update(session_id, update_agent_message_text(f"(replayed {word})"))
        return LoadSessionResponse(**self._setup())

    async def authenticate(self, method_id: str, **kw: Any) -> Any:
        self.authed = method_id
        return {}

    async def set_session_mode(self, session_id: str, mode_id: str, **kw: Any) -> Any:
        self.sessions[session_id]["mode"] = mode_id
        return {}

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **kw: Any) -> SetSessionConfigOptionResponse:
        if config_id != "model" or value not in ("small", "large"):
            raise RequestError.invalid_params({"configId": config_id})
        self.sessions[session_id]["model"] = value
        return SetSessionConfigOptionResponse(config_options=[self._model_option(value)])

    async def close_session(self, session_id: str, **kw: Any) -> CloseSessionResponse:
        if self.args.state:
            Path(self.args.state, f"closed-{session_id}").write_text("closed")
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kw: Any) -> None:
        ev = self.cancelled.get(session_id)
        if ev is not None:
            ev.set()

    # -- state for session/load -----------------------------------------------------------------
    def _save(self, sid: str) -> None:
        if self.args.state:
            Path(self.args.state, f"{sid}.json").write_text(json.dumps(self.sessions[sid]))

    def _load(self, sid: str) -> dict[str, Any] | None:
        if not self.args.state:
            return None
        path = Path(self.args.state, f"{sid}.json")
        return json.loads(path.read_text()) if path.exists() else None

    # -- the turn -------------------------------------------------------------------------
    async def say(self, sid: str, text: str) -> None:
        await self.conn.session_update(sid, update_agent_message_text(text))

    async def _commands(self, sid: str) -> None:
        await self.conn.session_update(
            sid,
            acp.helpers.update_available_commands(
                [AvailableCommand(name="review", description="Review the diff", input=UnstructuredCommandInput(hint="what to review"))]
            ),
        )

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> Any:
        sid = session_id
        self.meta = kw  # the SDK spreads the request's `_meta` into the call's keywords
        words = " ".join(getattr(b, "text", "") for b in prompt).split()
        cancel = self.cancelled[sid] = asyncio.Event()
        for word in words:
            name, _, arg = word.partition(":")
            result = await self.step(sid, name, arg, cancel)
            if result is not None:
                return result
        return PromptResponse(stop_reason="end_turn")

    async def step(self, sid: str, name: str, arg: str, cancel: asyncio.Event) -> Any:
        conn, state = self.conn, self.sessions[sid]
        if name == "text":
            for i in range(int(arg or 1)):
                await self.say(sid, f"c{i} ")
        elif name == "think":
            await conn.session_update(sid, update_agent_thought_text("thinking"))
        elif name == "tool":
            await conn.session_update(sid, acp.start_tool_call("t1", "Read README.md", kind="read", status="pending"))
            await conn.session_update(sid, acp.update_tool_call("t1", status="in_progress"))
            await conn.session_update(
                sid, acp.update_tool_call("t1", status="completed", content=[acp.tool_content(text_block("# readme"))], raw_output={"ok": True})
            )
        elif name in ("ask", "askread", "askfresh"):
            kind = {"ask": "edit", "askread": "read", "askfresh": "execute"}[name]
            tid = "t3" if name == "askfresh" else "t2"
            if name != "askfresh":
                await conn.session_update(sid, acp.start_tool_call("t2", f"{kind} notes.txt", kind=kind, status="pending"))
            options = [
                PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ]
            answer = await conn.request_permission(session_id=sid, tool_call=_asked_tool_call(tid, kind), options=options)
            outcome = answer.outcome
            chosen = getattr(outcome, "option_id", None) or "cancelled"
            await self.say(sid, f"permission={chosen}")
            if chosen == "cancelled":
                return PromptResponse(stop_reason="cancelled")
        elif name == "traceparent":
            await self.say(sid, f"traceparent={getattr(self, 'meta', {}).get('traceparent')}")
        elif name == "progress":
            update = update_agent_thought_text("Working on it.")
            update.field_meta = {"agentBridge": {"progress": True}}
            await conn.session_update(sid, update)
        elif name == "data":
            resource = TextResourceContents(uri="data:application/json", mime_type="application/json", text=json.dumps(DATA))
            await conn.session_update(sid, acp.update_agent_message(EmbeddedResourceContentBlock(type="resource", resource=resource)))
        elif name == "slow":
            for i in range(600):
                if cancel.is_set():
                    await self.say(sid, "stopping")
                    return PromptResponse(stop_reason="cancelled")
                await self.say(sid, f"tick{i} ")
                try:
                    await asyncio.wait_for(cancel.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
        elif name == "hang":
            await asyncio.sleep(3600)
        elif name == "crash":
            await self.say(sid, "about to crash")
            await asyncio.sleep(0.05)
            os._exit(3)
        elif name == "child":
            child = subprocess.Popen(["sleep", "600"])
            await self.say(sid, f"child={child.pid}")
        elif name == "pid":
            await self.say(sid, f"pid={os.getpid()}")
        elif name == "noreason":
            return {}
        elif name == "badreason":
            return {"stopReason": "weird"}
        elif name == "late":
            asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(self.say(sid, "too late")))
        elif name == "garbage":
            os.write(1, b"this is not json at all\n")
            await self.say(sid, "after garbage")
        elif name == "remember":
            state["memory"].append(arg)
            self._save(sid)
            await self.say(sid, f"remembered {arg}")
        elif name == "recall":
            await self.say(sid, "memory=" + ",".join(state["memory"]))
        elif name == "read":
            try:
                res = await conn.read_text_file(session_id=sid, path=arg)
                await self.say(sid, f"read={res.content}")
            except RequestError as exc:
                await self.say(sid, f"read-error={exc.code}")
        elif name == "write":
            try:
                await conn.write_text_file(session_id=sid, path=arg, content="written by agent")
                await self.say(sid, "wrote")
            except RequestError as exc:
                await self.say(sid, f"write-error={exc.code}")
        elif name == "term":
            cmd, *args = arg.split(",")
            try:
                term = await conn.create_terminal(session_id=sid, command=cmd, args=args, output_byte_limit=2048)
                await conn.wait_for_terminal_exit(session_id=sid, terminal_id=term.terminal_id)
                out = await conn.terminal_output(session_id=sid, terminal_id=term.terminal_id)
                await conn.release_terminal(session_id=sid, terminal_id=term.terminal_id)
                code = out.exit_status.exit_code if out.exit_status else None
                await self.say(sid, f"term={code}|{out.truncated}|{out.output}")
            except RequestError as exc:
                await self.say(sid, f"term-error={exc.code}")
        elif name == "caps":
            await self.say(sid, "caps=" + json.dumps(self.caps.model_dump(mode="json", by_alias=True, exclude_none=True)))
        elif name == "env":
            await self.say(sid, f"env:{arg}={os.environ.get(arg, '-unset-')}")
        elif name == "cwd":
            await self.say(sid, f"cwd={os.getcwd()}|{state['cwd']}")
        elif name == "mcp":
            await self.say(sid, "mcp=" + ",".join(state["mcp"]))
        elif name == "usage":
            await conn.session_update(sid, acp.schema.UsageUpdate(session_update="usage_update", used=1234, size=200000))
        elif name == "setmode":
            state["mode"] = arg
            await conn.session_update(sid, acp.helpers.update_current_mode(arg))
        elif name == "commands":
            await self._commands(sid)
        elif name == "bench":
            update = update_agent_message_text("x")
            for _ in range(int(arg)):
                await conn.session_update(sid, update)
        elif name == "pace":
            count, _, ms = arg.partition(":")
            for _ in range(int(count)):
                await self.say(sid, f"t={time.monotonic_ns()}")
                await asyncio.sleep(float(ms or 2) / 1000)
        elif name == "big":
            await self.say(sid, "x" * int(arg))
        elif name == "model":
            await self.say(sid, f"model={state.get('model', 'small')}|mode={state['mode']}")
        elif name == "auth":
            await self.say(sid, f"auth={self.authed}")
        else:
            await self.say(sid, f"{name} ")
        return None


def _asked_tool_call(tid: str, kind: str) -> ToolCallUpdate:
    """The toolCall of a permission request, every field of ACP's ToolCallUpdate set."""
    if tid == "t3":
        return ToolCallUpdate(
            tool_call_id=tid, title="Run make test", kind=kind, status="pending",
            locations=[ToolCallLocation(path="Makefile", line=3)], raw_input={"command": "make test"},
        )  # fmt: skip
    return ToolCallUpdate(
        tool_call_id=tid, title=f"{kind} notes.txt", kind=kind, status="pending",
        locations=[ToolCallLocation(path="notes.txt", line=1)], raw_input={"path": "notes.txt", "text": "new"},
        content=[FileEditToolCallContent(type="diff", path="notes.txt", old_text="old", new_text="new")],
    )  # fmt: skip


def main() -> None:
    args = _args()
    # session/close is routed by the SDK's unstable protocol only (0.12.1).
    asyncio.run(acp.run_agent(ScriptAgent(args), use_unstable_protocol=args.close))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
