"""The matrix's front drivers: each runs every kind of one (front, back) pair in ONE client
(one SDK process where the client is an SDK) and returns what was shown, folded.

Questions are answered per `Kind.answer`; a cancel follows the first chunk with the
protocol's own cancel (ACP session/cancel, A2A CancelTask, chat:stop, MCP
notifications/cancelled, Ctrl-C for `agent-bridge ask`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from tests.daemon_support import PEERS, Daemon
from tests.npm_support import node_exe
from tests.matrix.fold import fold_acp, fold_ws
from tests.matrix.fold_a2a import fold_a2a, fold_mcp
from tests.matrix.fold_ask import fold_ask
from tests.matrix.kinds import Kind, Seen

__all__ = ["A2A_JS_CLIENT", "DRIVERS", "Run"]

A2A_JS_CLIENT = PEERS / "a2a_js_client"


class Run(msgspec.Struct):
    """The matrix's daemon and what its drivers need."""

    daemon: Daemon
    config: Path
    tmp: Path
    env: dict[str, str]
    exe: list[str]


Result = dict[str, Seen | str]  # kind → Seen, or what went wrong driving it


def _plan(kinds: list[Kind]) -> list[dict[str, Any]]:
    return [{"name": k.name, "prompt": k.prompt, "answer": msgspec.to_builtins(k.answer) if k.answer else None,
             "cancel": k.cancel_after_first_chunk} for k in kinds]  # fmt: skip


async def _script(run: Run, argv: list[str]) -> Any:
    proc = await trio.run_process([sys.executable, *argv], capture_stdout=True, capture_stderr=True, check=False, env=run.env)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"crash": f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-3000:]}"}


def _folded(report: dict[str, Any], kinds: list[Kind], fold: Callable[[dict[str, Any]], Seen]) -> Result:
    out: Result = {}
    for k in kinds:
        raw = report.get(k.name)
        out[k.name] = fold(raw) if isinstance(raw, dict) else f"not run: {report.get('crash') or raw}"
    return out


async def _acp(run: Run, route: str, kinds: list[Kind], bridge: list[str]) -> Result:
    opts = {"cwd": str(run.tmp), "stderr": str(run.tmp / f"acp-{route}.log"), "kinds": _plan(kinds)}
    return _folded(await _script(run, [str(PEERS / "acp_matrix_client.py"), json.dumps(opts), *bridge]), kinds, fold_acp)


async def acp_stdio(run: Run, route: str, kinds: list[Kind]) -> Result:
    cmd = [*run.exe, "acp", route, "--config", str(run.config), "--state-dir", str(run.tmp / f"stdio-{route}")]
    return await _acp(run, route, kinds, cmd)


async def acp_socket(run: Run, route: str, kinds: list[Kind]) -> Result:
    assert run.daemon.acp_socket is not None
    return await _acp(run, route, kinds, [*run.exe, "acp", route, "--connect", run.daemon.acp_socket])


def _a2a(binding: str, dialect: str) -> Callable[[Run, str, list[Kind]], Awaitable[Result]]:
    async def drive(run: Run, route: str, kinds: list[Kind]) -> Result:
        opts = {"url": run.daemon.url, "route": route, "binding": binding, "dialect": dialect, "kinds": _plan(kinds)}
        return _folded(await _script(run, [str(PEERS / "a2a_matrix_client.py"), json.dumps(opts)]), kinds, fold_a2a)

    return drive


async def ws(run: Run, route: str, kinds: list[Kind]) -> Result:
    """Our own wire (there is no official chat SDK): trio-websocket, one connection for all kinds."""
    import httpx
    from trio_websocket import open_websocket_url

    out: Result = {}
    async with httpx.AsyncClient(base_url=run.daemon.url, timeout=30) as h:
        async with open_websocket_url(run.daemon.url.replace("http://", "ws://") + "/ws") as conn:
            for k in kinds:
                sid = (await h.post("/api/sessions", json={"route": route})).json()["session_id"]
                send = {"session_id": sid, "message": k.prompt}
                await conn.send_message(json.dumps({"event": "chat:send", "data": send}))
                frames: list[dict[str, Any]] = []
                stopped = False
                while True:
                    f = json.loads(await conn.get_message())
                    if (f.get("data") or {}).get("session_id") not in (sid, None):
                        continue
                    frames.append(f)
                    p = (f.get("data") or {}).get("data") or {}
                    if k.cancel_after_first_chunk and not stopped and p.get("type") == "text":
                        stopped = True
                        await conn.send_message(json.dumps({"event": "chat:stop", "data": {"session_id": sid}}))
                    if p.get("tool_name") == "AskUserQuestion" and k.answer:
                        labels = [o["label"] for o in json.loads(p["arguments"])["questions"][0]["options"]]
                        wanted = k.answer.selected or ((k.answer.label,) if k.answer.label else ())
                        answer: dict[str, Any] = {"tool_call_id": p["id"], "selections": {"0": [labels.index(w) for w in wanted if w in labels]}}
                        if k.answer.text:
                            answer["custom"] = {"0": k.answer.text}
                        await conn.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "", "askuser_answer": answer}}))
                    if f["event"] == "chat:end":
                        break
                out[k.name] = fold_ws(frames)
    return out


async def mcp(run: Run, route: str, kinds: list[Kind]) -> Result:
    """The official `mcp` SDK client over /mcp; it declares elicitation and answers forms per `Kind.answer`."""
    from mcp import Client, types

    sys.path.insert(0, str(PEERS))
    from acp_matrix_client import form_answer  # the same form filler as the ACP editor

    out: Result = {}
    for k in kinds:
        report: dict[str, Any] = {"elicitations": []}

        async def elicit(_ctx: Any, params: Any, k: Kind = k, report: dict[str, Any] = report) -> Any:
            raw = params.model_dump(mode="json", by_alias=True, exclude_none=True)
            report["elicitations"].append(raw)
            return types.ElicitResult(action="accept", content=form_answer(raw.get("requestedSchema") or {}, msgspec.to_builtins(k.answer or {})))

        async with Client(run.daemon.url + "/mcp", mode="legacy", cache=None, elicitation_callback=elicit) as client:
            with trio.CancelScope() as scope:

                async def progress(_p: float, _t: float | None, _m: str | None, k: Kind = k, scope: trio.CancelScope = scope) -> None:
                    if k.cancel_after_first_chunk:
                        report["cancelled"] = True
                        scope.cancel()

                try:
                    result = await client.call_tool(route, {"prompt": k.prompt}, progress_callback=progress)
                    report["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                except Exception as exc:  # noqa: BLE001 - reported in the cell
                    report["error"] = f"{type(exc).__name__}: {exc}"
        out[k.name] = fold_mcp(report)
    return out


def _a2a_js(binding: str) -> Callable[[Run, str, list[Kind]], Awaitable[Result]]:
    """@a2a-js/sdk's client (node, tests/peers/a2a_js_client; its npm ci ran before the matrix)."""

    async def drive(run: Run, route: str, kinds: list[Kind]) -> Result:
        opts = {"url": run.daemon.url, "route": route, "binding": binding, "kinds": _plan(kinds)}
        proc = await trio.run_process([node_exe(), str(A2A_JS_CLIENT / "client.mjs"), json.dumps(opts)], capture_stdout=True,
                                      capture_stderr=True, check=False, env=run.env)  # fmt: skip
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            report = {"crash": f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-3000:]}"}
        return _folded(report, kinds, fold_a2a)

    return drive


_POLICY = {"allow_once": "allow", "reject_once": "reject"}  # `ask --answer`: by option kind, else the first option


async def _ask_one(run: Run, route: str, k: Kind) -> Seen | str:
    """One `agent-bridge ask` with stdout on a pseudo-terminal (what a user sees) and stderr on a pipe."""
    cmd = [*run.exe, "ask", route, k.prompt, "--config", str(run.config), "--state-dir", str(run.tmp / f"ask-{route}-{k.name}")]
    if k.answer is not None:
        cmd += ["--answer", _POLICY.get(k.answer.option_kind or "", "first")]
    master, slave = os.openpty()
    try:
        proc = await trio.lowlevel.open_process(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=run.env)
    finally:
        os.close(slave)
    out, err = bytearray(), bytearray()

    async def terminal() -> None:
        async with trio.lowlevel.FdStream(master) as pty:
            while True:
                try:
                    chunk = await pty.receive_some()
                except trio.BrokenResourceError:  # EIO: the last writer closed the terminal
                    return
                if not chunk:
                    return
                out.extend(chunk)
                if k.cancel_after_first_chunk and b"tick" in out and proc.returncode is None:
                    proc.send_signal(signal.SIGINT)  # Ctrl-C once the first chunk is shown

    async def errors() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.receive_some():
            err.extend(chunk)

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(terminal)
                nursery.start_soon(errors)
                await proc.wait()
    except trio.TooSlowError:
        proc.kill()
        return f"not done in 60 s: {out.decode(errors='replace')[-2000:]} {err.decode(errors='replace')[-2000:]}"
    return fold_ask(out.decode(errors="replace"), err.decode(errors="replace"))


async def ask(run: Run, route: str, kinds: list[Kind]) -> Result:
    """The `agent-bridge ask` CLI, one process per kind (it runs the route in-process, from the daemon's config)."""
    return {k.name: await _ask_one(run, route, k) for k in kinds}


DRIVERS: dict[str, Callable[[Run, str, list[Kind]], Awaitable[Result]]] = {
    "acp_stdio": acp_stdio,
    "acp_socket": acp_socket,
    "ws": ws,
    "a2a_jsonrpc": _a2a("JSONRPC", "1.0"),
    "a2a_rest": _a2a("HTTP+JSON", "1.0"),
    "a2a_v03": _a2a("JSONRPC", "0.3"),
    "mcp": mcp,
    "ask": ask,
    "a2a_js_jsonrpc": _a2a_js("JSONRPC"),
    "a2a_js_rest": _a2a_js("HTTP+JSON"),
}
