"""Helpers for the daemon-as-a-service tests: the real `agent-bridge serve` process.

- `Notifications`: a test `$NOTIFY_SOCKET` (a unix datagram socket read by a thread,
  so it keeps receiving, with timestamps, even while the test's own loop waits).
- `start_daemon(...)`: spawns `agent-bridge serve` with a config written from a dict,
  waits for its `listening ...` line and yields a `Daemon` (its URL, ACP socket, log).
- `AcpClient`: raw newline-delimited JSON-RPC over the daemon's ACP unix socket
  (preamble included) or over any stdio pair (the `--connect` shim).
- `descendants(pid)`, `alive(pid)`: the process table, from /proc.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio

TESTS = Path(__file__).resolve().parent


# -- config -------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)


def toml(doc: dict[str, Any]) -> str:
    """A small TOML writer: top-level keys, [tables] and [tables.sub] of scalars and inline tables."""
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in doc.items():
        if isinstance(value, dict) and key in ("routes", "server", "daemon", "store", "cluster", "acp", "ws"):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in tables:
        if key == "routes":
            for name, route in value.items():
                lines.append(f"[routes.{json.dumps(name)}]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in route.items()]
        else:
            lines.append(f"[{key}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in value.items()]
    return "\n".join(lines) + "\n"


def toml_head(tmp_path: Path) -> str:
    """`[server]` and `[daemon]` of a test daemon's TOML, for a config written as text."""
    return f"""
[server]
listen = "127.0.0.1:0"
graceful_timeout_s = 1

[daemon]
acp_socket = "{tmp_path / 'run' / 'acp.sock'}"
"""


def demo_route(**back: Any) -> dict[str, Any]:
    return {"back": {"kind": "demo", "chunk_delay_s": 0.0, **back}}


def base_config(tmp_path: Path, routes: dict[str, Any], **sections: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"routes": routes}
    doc["server"] = {"listen": "127.0.0.1:0", "graceful_timeout_s": 1, **sections.pop("server", {})}
    doc["daemon"] = {"acp_socket": str(tmp_path / "run" / "acp.sock"), **sections.pop("daemon", {})}
    doc.update(sections)
    return doc


# -- $NOTIFY_SOCKET ---------------------------------------------------------------------------


class Notifications:
    """Every sd_notify datagram received, as (monotonic time, {KEY: VALUE})."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def snapshot(self) -> list[tuple[float, dict[str, str]]]:
        with self._lock:
            return list(self.messages)

    def states(self) -> list[str]:
        """The state changes in order: READY, RELOADING, STOPPING (not STATUS or WATCHDOG)."""
        out = []
        for _, m in self.snapshot():
            for key in ("RELOADING", "READY", "STOPPING"):
                if m.get(key) == "1":
                    out.append(key)
        return out

    async def wait_for(self, pred: Callable[[list[str]], bool], timeout: float = 15) -> list[str]:
        with trio.fail_after(timeout):
            while not pred(self.states()):
                await trio.sleep(0.02)
        return self.states()

    def close(self) -> None:
        self._stop = True
        self._thread.join(1)
        self.sock.close()


# -- the process table ------------------------------------------------------------------


def _ppid_map() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                out[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid: int) -> set[int]:
    parents = _ppid_map()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier and child not in found}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


# -- the daemon -------------------------------------------------------------------------------


class Daemon:
    def __init__(self, proc: trio.Process, url: str, acp_socket: str | None, log: Path, config: Path) -> None:
        self.proc = proc
        self.url = url
        self.acp_socket = acp_socket
        self.log = log
        self.config = config
        self.stdout_tail = b""  # what came on stdout after the `listening` line, with it

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def wait(self, timeout: float = 20) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()

    async def get(self, path: str) -> tuple[int, bytes]:
        """A plain HTTP/1.0 GET (no client library needed)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    @contextlib.asynccontextmanager
    async def acp(self, route: str | None) -> AsyncIterator[AcpClient]:
        assert self.acp_socket is not None
        stream = await trio.open_unix_socket(self.acp_socket)
        async with stream:
            client = AcpClient(stream, stream)
            ack = await client.preamble(route)
            assert ack.get("ok"), ack
            async with client.running():
                yield client


@contextlib.asynccontextmanager
async def start_daemon(
    bridge_exe: list[str],
    tmp_path: Path,
    env: dict[str, str],
    config: dict[str, Any] | str,
    *,
    args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    name: str = "daemon",
    wrapper: list[str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> AsyncIterator[Daemon]:
    path = tmp_path / f"{name}.toml"
    path.write_text(config if isinstance(config, str) else toml(config))  # a str: TOML as is
    log = tmp_path / f"{name}.log"
    command = [*(wrapper or []), *bridge_exe, "serve", "--config", str(path), "--state-dir", str(tmp_path / "state"), *args]
    with log.open("ab") as err:
        proc = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=err, env={**env, **(extra_env or {})}, pass_fds=pass_fds
        )
    try:
        buf = b""
        with trio.fail_after(20):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, f"the daemon exited: {log.read_text(errors='replace')}"
                buf += chunk
        words = buf.split(b"\n")[0].decode().split()
        assert words[0] == "listening", words
        url = next(w for w in words if w.startswith("http://"))
        unix = next((w.removeprefix("unix:") for w in words if w.startswith("unix:")), None)
        daemon = Daemon(proc, url, unix, log, path)
        daemon.stdout_tail = buf.split(b"\n", 1)[1]
        yield daemon
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(10):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


# -- a raw ACP client -----------------------------------------------------------------------


class AcpClient:
    """Newline-delimited JSON-RPC; a reader task files responses by id and keeps notifications."""

    def __init__(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        self.receive = receive
        self.send = send
        self.ids = itertools.count(1)
        self.responses: dict[Any, dict[str, Any]] = {}
        self.notes: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # requests the agent sent us
        self.eof = False
        self._buf = b""
        self._changed = trio.Event()
        self.on_request: Callable[[dict[str, Any]], Any] | None = None

    async def preamble(self, route: str | None) -> dict[str, Any]:
        await self.send.send_all(json.dumps({"route": route}).encode() + b"\n")
        while b"\n" not in self._buf:
            chunk = await self.receive.receive_some(65536)
            if not chunk:
                raise EOFError("no answer to the preamble")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reader)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    async def _reader(self) -> None:
        while True:
            while b"\n" in self._buf:
                line, _, self._buf = self._buf.partition(b"\n")
                if line.strip():
                    await self._handle(json.loads(line))
            try:
                chunk = await self.receive.receive_some(1 << 20)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            if not chunk:
                self.eof = True
                self._poke()
                return
            self._buf += chunk

    async def _handle(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:
            self.requests.append(msg)
            answer = self.on_request(msg) if self.on_request else {"outcome": {"outcome": "cancelled"}}
            await self.write({"jsonrpc": "2.0", "id": msg["id"], "result": answer})
        elif "method" in msg:
            self.notes.append(msg)
        else:
            self.responses[msg.get("id")] = msg
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def write(self, msg: dict[str, Any]) -> None:
        await self.send.send_all(json.dumps(msg).encode() + b"\n")

    async def start(self, method: str, params: dict[str, Any]) -> int:
        rid = next(self.ids)
        await self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    async def until(self, pred: Callable[[], bool], timeout: float = 15) -> None:
        with trio.fail_after(timeout):
            while not pred():
                if self.eof:
                    raise EOFError("the connection closed")
                await self._changed.wait()

    async def response(self, rid: int, timeout: float = 15) -> dict[str, Any]:
        await self.until(lambda: rid in self.responses, timeout)
        return self.responses[rid]

    async def call(self, method: str, params: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
        return await self.response(await self.start(method, params), timeout)

    async def result(self, method: str, params: dict[str, Any], timeout: float = 15) -> Any:
        msg = await self.call(method, params, timeout)
        assert "result" in msg, msg
        return msg["result"]

    async def init(self) -> dict[str, Any]:
        return await self.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})

    async def new(self, cwd: str = "/tmp") -> str:
        return (await self.result("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]

    def chunks(self, session_id: str) -> list[str]:
        return [
            n["params"]["update"]["content"].get("text", "")
            for n in self.notes
            if n["method"] == "session/update"
            and n["params"]["sessionId"] == session_id
            and n["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
        ]

    async def prompt(self, session_id: str, text: str) -> int:
        return await self.start("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})


# -- a normal turn on every front (the fault-injection and fuzz suites) -------------------------

PEERS = TESTS / "peers"
ACP_SDK_CLIENT = PEERS / "acp_sdk_client.py"


async def _a2a_turn(d: Daemon, route: str, word: str) -> None:
    import httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": f"alive-{word}", "role": "ROLE_USER", "parts": [{"text": f"a2a {word}"}]}}}  # fmt: skip
    async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        r = await h.post(f"/a2a/{route}", json=body, headers={"A2A-Version": "1.0"})
    assert r.status_code == 200, r.text
    task = r.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert f"a2a {word}" in json.dumps(task), task


async def _ws_and_rest_turn(d: Daemon, route: str, word: str) -> None:
    import httpx
    from trio_websocket import open_websocket_url

    async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        r = await h.post("/api/sessions", json={"route": route})
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
        async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
            await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": f"ws {word}"}}))
            while True:
                frame = json.loads(await ws.get_message())
                assert frame["event"] != "system:error", frame
                if frame["event"] == "chat:end":
                    assert frame["data"]["status"] == "completed", frame
                    break
        r = await h.get(f"/api/sessions/{sid}/messages")
        assert r.status_code == 200, r.text
        assert f"ws {word}" in r.text and f"You said: ws {word}" in r.text, r.text


async def _mcp_turn(d: Daemon, route: str, word: str) -> None:
    from mcp import Client

    async with Client(d.url + "/mcp", mode="legacy", cache=None) as client:
        result = await client.call_tool(route, {"prompt": f"mcp {word}"})
    assert not result.is_error, result
    assert result.content[0].text == f"You said: mcp {word}", result


async def _acp_turn(d: Daemon, route: str, word: str, env: dict[str, str]) -> None:
    """The official ACP Python SDK (its own process) through `agent-bridge acp --connect`."""
    import sys

    assert d.acp_socket is not None
    exe = Path(sys.executable).with_name("agent-bridge")
    shim = [str(exe), "acp", route, "--connect", d.acp_socket]
    opts = {"cwd": str(d.config.parent), "timeout_s": 30}
    proc = await trio.run_process(
        [sys.executable, str(ACP_SDK_CLIENT), "persist_write", json.dumps(opts), *shim],
        capture_stdout=True, capture_stderr=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    report = json.loads(proc.stdout)
    assert "crash" not in report, report["crash"]
    for name in ("prompt1", "prompt2"):
        assert report["results"][name] == {"result": {"stopReason": "end_turn"}}, report["results"]


async def assert_serves_every_front(d: Daemon, env: dict[str, str], *, route: str = "demo", word: str = "alive") -> None:
    """One normal turn on every front at once: A2A JSON-RPC, /ws chat:send then REST history,
    MCP tools/call (the `mcp` SDK) and ACP (the ACP SDK through `agent-bridge acp --connect`)."""
    assert d.proc.returncode is None, f"the daemon died: {d.log_text()[-4000:]}"
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_a2a_turn, d, route, word)
                nursery.start_soon(_ws_and_rest_turn, d, route, word)
                nursery.start_soon(_mcp_turn, d, route, word)
                nursery.start_soon(_acp_turn, d, route, word, env)
    except BaseException as exc:
        exc.add_note(f"--- daemon log (tail):\n{d.log_text()[-4000:]}")
        raise


async def until_log(d: Daemon, needle: str, count: int = 1) -> None:
    """`needle` `count` times in the daemon's log. The log is a file the daemon writes;
    there is no event to wait on but its growth, so this reads it as it grows."""
    while d.log_text().count(needle) < count:
        await trio.sleep(0.05)


async def still_serves(d: Daemon, *, route: str = "demo", word: str = "alive", log_from: int = 0) -> None:
    """The daemon is up and a normal /ws client gets a whole turn; no traceback logged
    (from `log_from` on)."""
    assert d.proc.returncode is None, f"the daemon died: {d.log_text()[-4000:]}"
    await _ws_and_rest_turn(d, route, word)
    text = d.log_text()[log_from:]
    assert "Traceback" not in text, text[-6000:]


class RawWs:
    """A WebSocket client by hand (RFC 6455 §5), so a frame can carry any bytes at all."""

    def __init__(self, stream: trio.SocketStream, buf: bytes) -> None:
        self.stream = stream
        self.buf = buf
        self.reset = False  # the server's TCP stack reset the connection (RST, not FIN)

    @classmethod
    async def open(cls, d: Daemon) -> RawWs:
        stream, rest = await raw_ws(d.url)
        return cls(stream, rest)

    async def send(self, payload: bytes, opcode: int = 1) -> None:
        await self.stream.send_all(ws_frame(payload, opcode))

    async def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            try:
                chunk = await self.stream.receive_some(1 << 20)
            except trio.BrokenResourceError:
                self.reset = True
                return False
            if not chunk:
                return False
            self.buf += chunk
        return True

    async def frame(self) -> tuple[int, bytes] | None:
        """(opcode, payload), or None at EOF."""
        if not await self._need(2):
            return None
        b0, b1 = self.buf[0], self.buf[1]
        n, at = b1 & 0x7F, 2
        if n == 126:
            if not await self._need(4):
                return None
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            if not await self._need(10):
                return None
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        if not await self._need(at + n):
            return None
        payload, self.buf = self.buf[at : at + n], self.buf[at + n :]
        return b0 & 0x0F, payload

    async def close_code(self) -> int:
        """The code of the server's close frame (data frames before it are skipped)."""
        while True:
            got = await self.frame()
            assert got is not None, "the connection ended without a close frame"
            if got[0] == 8:
                return struct.unpack("!H", got[1][:2])[0] if len(got[1]) >= 2 else 1005

    async def end(self) -> None:
        """Read to the end of the stream: the server has handled all we sent."""
        while await self.frame() is not None:
            pass


async def raw_ws(url: str, *, rcvbuf: int | None = None) -> tuple[trio.SocketStream, bytes]:
    """A WebSocket upgrade to `url`'s /ws by hand (RFC 6455 §4.1), on a socket the test
    controls: a small `rcvbuf` makes the daemon's writes block sooner, and any bytes at
    all can be sent as frames. Returns the stream and what followed the 101 head."""
    import base64

    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    await sock.connect((host, int(port)))
    stream = trio.SocketStream(sock)
    key = base64.b64encode(os.urandom(16)).decode()
    await stream.send_all(
        f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = await stream.receive_some(65536)
        assert chunk, "the daemon closed the upgrade"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"101", head
    return stream, rest


def ws_frame(payload: bytes, opcode: int = 1, *, fin: bool = True) -> bytes:
    """One masked client frame holding any bytes (RFC 6455 §5.2: the shortest length);
    `fin=False` makes it a fragment that a continuation frame (opcode 0) must follow (§5.4)."""

    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big") if n else b""
    return head + mask + masked


@contextlib.asynccontextmanager
async def serve_peer(command: list[str], log: Path) -> AsyncIterator[int]:
    """Run a peer that binds 127.0.0.1 and prints `PORT <n>`; yield n; stop it at the end."""
    with open(log, "wb") as err:
        proc = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        try:
            assert proc.stdout is not None
            buf = b""
            with trio.fail_after(60):
                while b"\n" not in buf:
                    chunk = await proc.stdout.receive_some()
                    assert chunk, f"{command[1]} exited before saying its port: {log.read_text()[-2000:]}"
                    buf += chunk
            yield int(buf.split(b"\n")[0].split()[1])
        finally:
            proc.terminate()
            with trio.move_on_after(5, shield=True):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
