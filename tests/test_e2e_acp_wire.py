"""End to end over raw NDJSON: the real `agent-bridge acp demo` process, no SDK in between.

What an SDK would never send: malformed JSON, arrays, missing members, wrong types,
frames over the size limit, requests before `initialize`. Each gets the JSON-RPC error
it deserves, and the very next valid request is still answered. Every test also checks,
when it closes the bridge's stdin, that stdout carried nothing but JSON-RPC 2.0 lines
and that the bridge then exited cleanly on its own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.store import open_store

MiB = 1024 * 1024


class RawBridge:
    """One bridge process spoken to line by line."""

    def __init__(self, proc: trio.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.lines: list[bytes] = []  # every stdout line, for the "only JSON-RPC" check
        self._buf = bytearray()
        self._next_id = 1000

    # -- sending -----------------------------------------------------------------------
    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(data)

    async def send(self, msg: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(msg).encode() + b"\n")

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    # -- receiving ---------------------------------------------------------------------
    async def _line(self) -> bytes:
        assert self.proc.stdout is not None
        while b"\n" not in self._buf:
            data = await self.proc.stdout.receive_some(1 << 20)
            if not data:
                raise EOFError(f"bridge closed stdout; stderr:\n{self.stderr()}")
            self._buf += data
        nl = self._buf.index(b"\n")
        line = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        self.lines.append(line)
        return line

    async def recv(self) -> dict[str, Any]:
        return json.loads(await self._line())

    async def until_response(self, request_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The response to `request_id`, and every other message that came before it."""
        others = []
        while True:
            msg = await self.recv()
            if "method" not in msg and msg.get("id") == request_id:
                return msg, others
            others.append(msg)

    async def call(self, method: str, params: Any = None, **extra: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rid = self.new_id()
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method, **extra}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return await self.until_response(rid)

    async def result(self, method: str, params: Any = None) -> Any:
        resp, _ = await self.call(method, params)
        assert "result" in resp, f"{method}: {resp}"
        return resp["result"]

    async def initialize(self) -> dict[str, Any]:
        return await self.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})

    async def new_session(self, cwd: str) -> str:
        return (await self.result("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    # -- closing -----------------------------------------------------------------------
    async def finish(self) -> None:
        """Close stdin; read stdout to its end; the bridge must exit 0 by itself."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        await self.proc.stdin.aclose()
        while True:
            data = await self.proc.stdout.receive_some(1 << 20)
            if not data:
                break
            self._buf += data
        *rest, tail = bytes(self._buf).split(b"\n")
        self.lines += rest
        assert tail == b"", f"stdout ended inside a line: {tail[:200]!r}"
        with trio.fail_after(10):
            code = await self.proc.wait()
        assert code == 0, f"bridge exited {code}; stderr:\n{self.stderr()}"
        for line in self.lines:
            msg = json.loads(line)  # every stdout line is one JSON value...
            assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", line[:300]  # ...a JSON-RPC 2.0 message
            assert "method" in msg or "result" in msg or "error" in msg, line[:300]


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    d = tmp_path / "project"
    d.mkdir()
    return str(d)


@pytest.fixture
def small_frames_config(tmp_path: Path) -> str:
    """configs/demo.toml's route with a 4 KiB frame limit."""
    path = tmp_path / "small-frames.toml"
    path.write_text(
        """
default_route = "demo"

[acp]
max_frame_bytes = 4096

[routes.demo]
title = "agent-bridge demo"
back = { kind = "demo" }

[[routes.demo.options]]
id = "mode"
name = "Mode"
category = "mode"
default = "code"
values = [{ value = "ask", name = "Ask" }, { value = "code", name = "Code" }]
"""
    )
    return str(path)


@pytest.fixture
def spawn(bridge_exe: list[str], state_dir: str, clean_env: dict[str, str], workdir: str, tmp_path: Path) -> Any:
    @contextlib.asynccontextmanager
    async def open_bridge(*args: str) -> AsyncIterator[RawBridge]:
        log = tmp_path / "bridge.log"
        with log.open("ab") as err:
            proc = await trio.lowlevel.open_process(
                [*bridge_exe, "acp", "demo", "--state-dir", state_dir, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=clean_env,
                cwd=workdir,
            )
        bridge = RawBridge(proc, log)
        try:
            with trio.fail_after(60):
                yield bridge
        finally:
            if proc.returncode is None:
                proc.kill()
                with trio.move_on_after(5, shield=True):
                    await proc.wait()

    return open_bridge


# -- requests out of order ------------------------------------------------------------------


async def test_initialize_comes_first(spawn: Any, workdir: str) -> None:
    async with spawn() as b:
        resp, _ = await b.call("session/new", {"cwd": workdir, "mcpServers": []})
        assert resp["error"]["code"] == -32600 and "initialize" in resp["error"]["message"]
        bad, _ = await b.call("initialize", {"protocolVersion": "one"})
        assert bad["error"]["code"] == -32602 and "$.protocolVersion" in bad["error"]["message"]
        assert (await b.initialize())["protocolVersion"] == 1
        await b.new_session(workdir)
        await b.finish()


# -- bad input, one after the other, on one connection --------------------------------------

def rpc(id: Any, method: str, params: Any) -> bytes:
    """A well-formed request (whatever is wrong is in its params)."""
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


NOPE_PROMPT = {"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}

# (name, bytes sent, expected error: (code, id, text in message) or None for "no answer")
BAD_INPUT: list[tuple[str, bytes, tuple[int, Any, str] | None]] = [
    ("malformed JSON", b"{not json", (-32700, None, "")),
    ("truncated JSON", b'{"jsonrpc":"2.0","id":3,"method":"session/li', (-32700, None, "")),
    ("invalid UTF-8", b"\xff\xfe{}", (-32700, None, "")),
    ("JSON array", b"[1, 2]", (-32600, None, "")),
    ("batch (ACP has none)", b"[" + rpc(5, "session/list", {}) + b"]", (-32600, None, "")),
    ("JSON string", b'"hello"', (-32600, None, "")),
    ("no method", b'{"jsonrpc":"2.0","id":7}', (-32600, 7, "")),  # JSON-RPC 2.0 §5: the id is readable
    ("no jsonrpc member", b'{"id":10,"method":"session/list","params":{}}', (-32600, 10, "2.0")),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":11,"method":"session/list","params":{}}', (-32600, 11, "2.0")),
    ("null request id", rpc(None, "session/list", {}), (-32600, None, "id")),
    ("object request id", rpc({"a": 1}, "session/list", {}), (-32600, None, "$.id")),
    ("unknown method", rpc(12, "session/teleport", {}), (-32601, 12, "session/teleport")),
    ("unknown extension method", rpc("x13", "_vendor/thing", {}), (-32601, "x13", "_vendor/thing")),
    ("cwd of the wrong type", rpc(14, "session/new", {"cwd": 5, "mcpServers": []}), (-32602, 14, "$.cwd")),
    ("cwd missing", rpc(15, "session/new", {"mcpServers": []}), (-32602, 15, "cwd")),
    ("relative cwd", rpc(16, "session/new", {"cwd": "rel/dir", "mcpServers": []}), (-32602, 16, "absolute")),
    ("params an array", rpc(17, "session/new", [1]), (-32602, 17, "object")),
    ("prompt a string", rpc(18, "session/prompt", {"sessionId": "s", "prompt": "hi"}), (-32602, 18, "$.prompt")),
    (
        "text block text an int",
        rpc(19, "session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": 5}]}),
        (-32602, 19, "$.prompt[0].text"),
    ),
    (
        "unknown block type",
        rpc(20, "session/prompt", {"sessionId": "s", "prompt": [{"type": "hologram"}]}),
        (-32602, 20, "$.prompt[0].type"),
    ),
    ("list cursor an int", rpc(21, "session/list", {"cursor": 5}), (-32602, 21, "$.cursor")),
    ("prompt on an unknown session", rpc(22, "session/prompt", NOPE_PROMPT), (-32002, 22, "nope")),
    (
        "load of an unknown session",
        rpc(23, "session/load", {"sessionId": "nope", "cwd": "/", "mcpServers": []}),
        (-32002, 23, "nope"),
    ),
    (
        "set_mode on an unknown session",
        rpc(24, "session/set_mode", {"sessionId": "nope", "modeId": "ask"}),
        (-32002, 24, "nope"),
    ),
    # Notifications and responses are never answered, whatever is wrong with them.
    ("notification with bad params", b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}', None),
    ("cancel of an unknown session", b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}', None),
    ("unknown notification", b'{"jsonrpc":"2.0","method":"_vendor/ping","params":{}}', None),
    ("response to nothing we asked", b'{"jsonrpc":"2.0","id":999,"result":{}}', None),
    ("error response with a null id", b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}', None),
    ("blank line", b"   ", None),
]


async def test_bad_input_gets_errors_and_the_bridge_keeps_serving(spawn: Any, workdir: str) -> None:
    async with spawn() as b:
        await b.initialize()
        for name, frame, expected in BAD_INPUT:
            await b.send_raw(frame + b"\n")
            # A valid request right behind it is still answered, after exactly the expected error.
            resp, before = await b.call("session/list", {})
            assert "result" in resp, (name, resp)
            if expected is None:
                assert before == [], (name, before)
                continue
            code, rid, needle = expected
            assert len(before) == 1, (name, before)
            (error,) = before
            assert error["jsonrpc"] == "2.0", name
            assert error["id"] == rid, (name, error)
            assert error["error"]["code"] == code, (name, error)
            assert needle in error["error"]["message"], (name, error)
        # CRLF line endings are fine too.
        await b.send_raw(b'{"jsonrpc":"2.0","id":"crlf","method":"session/list","params":{}}\r\n')
        resp, _ = await b.until_response("crlf")
        assert "result" in resp
        # Still fully working: a whole turn.
        sid = await b.new_session(workdir)
        resp, updates = await b.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert resp["result"] == {"stopReason": "end_turn"}
        assert updates and all(u["method"] == "session/update" for u in updates)
        await b.finish()
    assert "WARNING" in b.stderr()  # the peer's faults are logged, on stderr


# -- bytes no decoder may choke on (issue 13: each used to end the process) -------------------


def _prompt_with(session_id: str, rid: int, block: bytes, meta: bytes = b"") -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":' + str(rid).encode() + b',"method":"session/prompt","params":{"sessionId":"'
        + session_id.encode() + b'"' + meta + b',"prompt":[' + block + b"]}}"
    )  # fmt: skip


def hostile_frames(session_id: str) -> list[tuple[str, bytes]]:
    return [
        ("invalid UTF-8 in a prompt's text", _prompt_with(session_id, 31, b'{"type":"text","text":"caf\xc3"}')),
        ("invalid UTF-8 in an unknown member", _prompt_with(session_id, 32, b'{"type":"text","text":"x","z":"\xff\xfe"}')),
        ("_meta integer beyond 64 bits", _prompt_with(session_id, 33, b'{"type":"text","text":"x"}', b',"_meta":{"n":-18446744073709551616}')),
        ("resource_link size beyond 64 bits", _prompt_with(session_id, 34, b'{"type":"resource_link","uri":"file:///a","name":"a","size":18446744073709551616}')),
        ("integer of 5000 digits", _prompt_with(session_id, 35, b'{"type":"text","text":"x"}', b',"_meta":{"n":' + b"9" * 5000 + b"}")),
        ("100 000 nested arrays", b"[" * 100_000 + b"]" * 100_000),
        ("100 000 nested arrays in params", b'{"jsonrpc":"2.0","id":36,"method":"session/list","params":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ]  # fmt: skip


async def test_hostile_bytes_get_parse_errors_and_the_session_keeps_serving(spawn: Any, workdir: str) -> None:
    async with spawn() as b:
        await b.initialize()
        sid = await b.new_session(workdir)
        for name, frame in hostile_frames(sid):
            await b.send_raw(frame + b"\n")
            resp, before = await b.call("session/list", {})
            assert "result" in resp, (name, resp, b.stderr()[-2000:])
            errors = [m for m in before if "method" not in m]  # (notifications of the session may come too)
            assert [e["error"]["code"] for e in errors] == [-32700], (name, before)
        # The session the refused prompts named runs a normal turn, and it is stored.
        resp, updates = await b.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert resp["result"] == {"stopReason": "end_turn"}
        assert any(u["params"]["update"].get("sessionUpdate") == "agent_message_chunk" for u in updates)
        await b.finish()


# -- frame size ----------------------------------------------------------------------------


def _prompt_frame(rid: Any, session_id: str, size: int) -> bytes:
    """A session/prompt request exactly `size` bytes long (without its newline)."""
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": ""}]}
    base = {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}
    empty = len(json.dumps(base, separators=(",", ":")))
    base["params"]["prompt"][0]["text"] = "x" * (size - empty)
    frame = json.dumps(base, separators=(",", ":")).encode()
    assert len(frame) == size
    return frame


async def test_oversized_frame_at_default_limit(spawn: Any, workdir: str) -> None:
    async with spawn() as b:
        await b.initialize()
        sid = await b.new_session(workdir)
        big = _prompt_frame("big", sid, 8 * MiB + 1)
        # The oversized frame and a valid one in the same write: error, then the answer.
        await b.send_raw(big + b"\n" + b'{"jsonrpc":"2.0","id":"next","method":"session/list","params":{}}\n')
        resp, before = await b.until_response("next")
        assert "result" in resp
        (error,) = [m for m in before if "method" not in m]  # (session/new's commands may come first)
        assert error["id"] is None
        assert error["error"]["code"] == -32600
        assert "max_frame_bytes" in error["error"]["message"] and str(8 * MiB) in error["error"]["message"]
        # The dropped prompt never started a turn: the session still takes one.
        resp, _ = await b.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
        assert resp["result"] == {"stopReason": "end_turn"}
        await b.finish()


async def test_frame_limit_from_config(spawn: Any, workdir: str, small_frames_config: str) -> None:
    async with spawn("--config", small_frames_config) as b:
        await b.initialize()
        sid = await b.new_session(workdir)

        # Exactly at the limit: a normal prompt.
        await b.send_raw(_prompt_frame("at", sid, 4096) + b"\n")
        resp, _ = await b.until_response("at")
        assert resp["result"] == {"stopReason": "end_turn"}

        # One byte over: an error naming the limit, with a null id (the frame was never read).
        await b.send_raw(_prompt_frame("over", sid, 4097) + b"\n")
        resp, before = await b.call("session/list", {})
        assert "result" in resp
        (error,) = before
        assert error["id"] is None and error["error"]["code"] == -32600
        assert "max_frame_bytes (4096)" in error["error"]["message"]

        # An oversized frame trickling in over several reads is one error, not several.
        frame = _prompt_frame("slow", sid, 3 * 4096)
        for i in range(0, len(frame), 1500):
            await b.send_raw(frame[i : i + 1500])
            await trio.sleep(0.01)
        await b.send_raw(b"\n")
        resp, before = await b.call("session/list", {})
        assert "result" in resp
        assert [m["error"]["code"] for m in before] == [-32600]
        assert "max_frame_bytes" in before[0]["error"]["message"]

        # Neither dropped prompt ran: one stored turn, "at"'s.
        load, replay = await b.call("session/load", {"sessionId": sid, "cwd": workdir, "mcpServers": []})
        assert "result" in load
        users = [m for m in replay if m["params"]["update"]["sessionUpdate"] == "user_message_chunk"]
        assert len(users) == 1
        await b.finish()


# -- request ids and cancellation ---------------------------------------------------------


async def test_an_id_still_in_flight_is_refused_and_cancel_request_ends_the_prompt(spawn: Any, workdir: str) -> None:
    # JSON-RPC 2.0 §5: a response carries its request's id, so an id a prompt still holds
    # is refused -32600 (a second turn under it could never be told apart, nor cancelled
    # when the editor goes away); `$/cancel_request` (ACP schema, CancelRequestNotification)
    # for the prompt cancels its turn as session/cancel does.
    async with spawn() as b:
        await b.initialize()
        sid = await b.new_session(workdir)
        slow = {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}
        await b.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": slow})
        again = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
        await b.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": again})
        refused, _ = await b.until_response("p")
        assert refused["error"]["code"] == -32600 and "in flight" in refused["error"]["message"], refused
        await b.send({"jsonrpc": "2.0", "id": "p", "method": "session/list", "params": {}})
        refused, _ = await b.until_response("p")
        assert refused["error"]["code"] == -32600, refused
        await b.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "p"}})
        with trio.fail_after(3):  # the slow turn streams for 5 s when left alone
            answer, updates = await b.until_response("p")
        assert answer["result"] == {"stopReason": "cancelled"}, answer
        said = "".join(u["params"]["update"]["content"]["text"] for u in updates if u.get("method") == "session/update"
                       and u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")  # fmt: skip
        assert "You said: hello" not in said
        # The id is free again once answered.
        await b.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": again})
        ok, _ = await b.until_response("p")
        assert ok["result"] == {"stopReason": "end_turn"}, ok
        await b.finish()


# -- big frames that are allowed ---------------------------------------------------------


async def test_one_mib_image_prompt(spawn: Any, workdir: str) -> None:
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * (3 * MiB // 4 // 256)).decode()
    assert len(image) > MiB
    async with spawn() as b:
        init = await b.initialize()
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
        sid = await b.new_session(workdir)
        prompt = [{"type": "text", "text": "look at this"}, {"type": "image", "mimeType": "image/png", "data": image}]
        resp, updates = await b.call("session/prompt", {"sessionId": sid, "prompt": prompt})
        assert resp["result"] == {"stopReason": "end_turn"}
        chunks = [u["params"]["update"] for u in updates]
        said = "".join(c["content"]["text"] for c in chunks if c["sessionUpdate"] == "agent_message_chunk")
        assert said == "You said: look at this"
        # It was stored whole: loading the session replays it byte for byte (a >1 MiB line out).
        load, replay = await b.call("session/load", {"sessionId": sid, "cwd": workdir, "mcpServers": []})
        assert "result" in load
        users = [m["params"]["update"] for m in replay if m["params"]["update"]["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"] for u in users] == prompt
        assert max(len(line) for line in b.lines) > MiB
        await b.finish()


# -- stdout is the protocol's alone -----------------------------------------------------------


async def test_stdout_carries_only_jsonrpc_even_when_logging_debug(spawn: Any, workdir: str) -> None:
    async with spawn("--log-level", "debug") as b:
        await b.initialize()
        sid = await b.new_session(workdir)
        await b.send_raw(b"{oops\n")
        rid = b.new_id()
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "all: hi"}]}
        await b.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
        # Answer the permission request by hand, as an editor would.
        seen = []
        while True:
            msg = await b.recv()
            seen.append(msg)
            if msg.get("method") == "session/request_permission":
                assert msg["params"]["sessionId"] == sid
                allow = next(o for o in msg["params"]["options"] if o["kind"] == "allow_once")
                outcome = {"outcome": "selected", "optionId": allow["optionId"]}
                await b.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"outcome": outcome}})
            elif msg.get("id") == rid and "method" not in msg:
                break
        assert seen[-1]["result"] == {"stopReason": "end_turn"}
        kinds = {m["params"]["update"]["sessionUpdate"] for m in seen if m.get("method") == "session/update"}
        every = {"agent_thought_chunk", "plan", "tool_call", "tool_call_update", "agent_message_chunk", "usage_update"}
        assert every <= kinds
        await b.finish()  # checks every stdout line
    log = b.stderr()
    assert "DEBUG" in log or "WARNING" in log


# -- Ctrl-C where it was started by hand ----------------------------------------------------


async def test_sigint_ends_it_quietly_with_the_session_stored(spawn: Any, workdir: str, state_dir: str) -> None:
    async with spawn() as b:
        await b.initialize()
        sid = await b.new_session(workdir)
        b.proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            code = await b.proc.wait()
        assert code == 128 + signal.SIGINT, b.stderr()
        assert "Traceback" not in b.stderr() and "KeyboardInterrupt" not in b.stderr(), b.stderr()
    store = open_store(state_dir)
    await store.open()
    try:
        assert await store.get_session(sid) is not None
    finally:
        await store.close()
