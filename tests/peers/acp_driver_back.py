"""An ACP editor on the official Python SDK, steered line by line by a test.

    python acp_driver_back.py

It reads one JSON command per line on stdin and writes one JSON event per line on
stdout, so a trio test can drive an asyncio-only SDK client step by step:

    {"cmd": "start", "argv": [...], "env": {...}, "stderr": PATH,
     "fs": bool, "terminal": bool, "files": {path: text}}      → {"event": "started", "init": ...}
    {"cmd": "new", "id": X, "cwd": DIR}                         → {"event": "result", "id": X, "result": ...}
    {"cmd": "prompt", "id": X, "session": SID, "text": T}       → "result" when the turn ends (async)
    {"cmd": "cancel", "session": SID}
    {"cmd": "policy", "session": SID | null, "value": "allow" | "always" | "reject" | "hold"}
    {"cmd": "set_config", "id": X, "session": SID, "config": ID, "value": V}
    {"cmd": "set_mode", "id": X, "session": SID, "mode": M}
    {"cmd": "exit"}                                             → {"event": "exited", "returncode": N}

Events it sends on its own: "update" (every session/update, dumped from the SDK's
models, so it validated), "permission" (a request and our answer), "fs" and
"terminal" (requests the bridge forwarded to us, the editor). A failed request's
result is {"error": {"code", "message", "data"}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import acp
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def dump(model: Any) -> Any:
    if model is None:
        return None
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RequestError):
        return {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}
    return {"error": {"code": None, "message": f"{type(exc).__name__}: {exc}", "data": None}}


class Editor:
    def __init__(self) -> None:
        self.policy: dict[str | None, str] = {None: "allow"}
        self.files: dict[str, str] = {}
        self.terminals = 0

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        emit({"event": "update", "sessionId": session_id, "update": dump(update)})

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any) -> Any:
        policy = self.policy.get(session_id, self.policy[None])
        record = {"event": "permission", "sessionId": session_id, "toolCall": dump(tool_call), "options": [dump(o) for o in options]}
        if policy == "hold":
            emit({**record, "answer": "hold"})
            await asyncio.sleep(3600)
        wanted = {"allow": "allow_once", "always": "allow_always", "reject": "reject_once"}[policy]
        chosen = next((o for o in options if o.kind == wanted), None)
        if chosen is None:
            response = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        else:
            response = RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))
        emit({**record, "answer": dump(response)})
        return response

    async def read_text_file(self, session_id: str, path: str, **kw: Any) -> ReadTextFileResponse:
        emit({"event": "fs", "method": "read", "sessionId": session_id, "path": path})
        if path not in self.files:
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=self.files[path])

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> WriteTextFileResponse:
        emit({"event": "fs", "method": "write", "sessionId": session_id, "path": path, "content": content})
        self.files[path] = content
        return WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, args: Any = None, **kw: Any) -> CreateTerminalResponse:
        self.terminals += 1
        emit({"event": "terminal", "method": "create", "sessionId": session_id, "command": command, "args": args})
        return CreateTerminalResponse(terminal_id=f"editor-term-{self.terminals}")

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any) -> WaitForTerminalExitResponse:
        emit({"event": "terminal", "method": "wait", "sessionId": session_id, "terminalId": terminal_id})
        return WaitForTerminalExitResponse(exit_code=0)

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any) -> TerminalOutputResponse:
        emit({"event": "terminal", "method": "output", "sessionId": session_id, "terminalId": terminal_id})
        return TerminalOutputResponse(output="output from the editor", truncated=False, exit_status=TerminalExitStatus(exit_code=0))

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> ReleaseTerminalResponse:
        emit({"event": "terminal", "method": "release", "sessionId": session_id, "terminalId": terminal_id})
        return ReleaseTerminalResponse()

    def on_connect(self, conn: Any) -> None:
        pass


async def run_request(rid: Any, coro: Any) -> None:
    try:
        result = await coro
        emit({"event": "result", "id": rid, "result": dump(result)})
    except Exception as exc:  # reported to the test, which decides
        emit({"event": "result", "id": rid, **error(exc)})


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    start = json.loads(await reader.readline())
    assert start["cmd"] == "start", start
    editor = Editor()
    editor.files = dict(start.get("files") or {})
    stderr = open(start["stderr"], "ab")  # noqa: SIM115
    argv = start["argv"]
    tasks: set[asyncio.Task[Any]] = set()
    async with spawn_agent_process(
        editor, argv[0], *argv[1:], env=start.get("env"), transport_kwargs={"stderr": stderr, "limit": 1 << 26}
    ) as (conn, process):
        caps = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=bool(start.get("fs")), write_text_file=bool(start.get("fs"))),
            terminal=bool(start.get("terminal")),
        )
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)
        emit({"event": "started", "init": dump(init), "pid": process.pid})
        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = json.loads(line)
            op, rid = cmd["cmd"], cmd.get("id")
            if op == "exit":
                break
            if op == "new":
                coro: Any = conn.new_session(cwd=cmd["cwd"], mcp_servers=[])
            elif op == "prompt":
                coro = conn.prompt(session_id=cmd["session"], prompt=[text_block(cmd["text"])])
            elif op == "cancel":
                await conn.cancel(session_id=cmd["session"])
                continue
            elif op == "policy":
                editor.policy[cmd.get("session")] = cmd["value"]
                continue
            elif op == "set_config":
                coro = conn.set_config_option(config_id=cmd["config"], session_id=cmd["session"], value=cmd["value"])
            elif op == "set_mode":
                coro = conn.set_session_mode(session_id=cmd["session"], mode_id=cmd["mode"])
            else:
                emit({"event": "result", "id": rid, "error": {"code": None, "message": f"unknown command {op}"}})
                continue
            task = asyncio.ensure_future(run_request(rid, coro))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        for task in tasks:
            task.cancel()
        process.stdin.close()  # type: ignore[union-attr]
        try:
            code = await asyncio.wait_for(process.wait(), 20)
        except asyncio.TimeoutError:
            process.kill()
            code = await process.wait()
    emit({"event": "exited", "returncode": code})


if __name__ == "__main__":
    asyncio.run(main())
