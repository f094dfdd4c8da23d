"""For benches that time single calls: a meter (wall and server CPU time per call) and
lean clients (HTTP/1.1, /ws frames, ACP over a unix socket).

Each client does as little as it can per call (no client library's own layers), so the
time of a call is the server's: requests are written whole, answers are read in 1 MiB
reads and not decoded inside the timed window. Not a test dependency.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import trio
from trio_websocket import WebSocketConnection

MAX_MESSAGE = 64 * 1024 * 1024
A2A_HEADERS = (("Content-Type", "application/json"), ("A2A-Version", "1.0"))


def cpu_ns(pid: int) -> dict[str, int]:
    """CPU time of each live thread of `pid`, in ns (`/proc/PID/task/*/schedstat`; the
    10 ms ticks of `/proc/PID/stat` are too coarse for one call). See `cpu_spent`."""
    out = {}
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                out[path] = int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return out


def cpu_spent(before: dict[str, int], after: dict[str, int]) -> float:
    """Seconds of CPU between two `cpu_ns` readings (a thread that ended in between
    loses what it did since `before`: trio's idle worker threads end after 10 s)."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


class Meter:
    """Wall and daemon CPU time of the timed window of each call."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.count: int | None = None  # what the last call returned (tasks listed, updates replayed, ...)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        c0, t0 = cpu_ns(self.pid), time.perf_counter()
        yield
        t1, c1 = time.perf_counter(), cpu_ns(self.pid)
        self.wall.append(t1 - t0)
        self.cpu.append(cpu_spent(c0, c1))


Call = Callable[[Meter], Awaitable[int | None]]


async def idle(pid: int, *, window: float = 0.05, limit: float = 5.0) -> None:
    """Wait until `pid` used under 2 % of a CPU over `window` seconds (at most `limit`)."""
    with trio.move_on_after(limit):
        while True:
            before = cpu_ns(pid)
            await trio.sleep(window)
            if cpu_spent(before, cpu_ns(pid)) < 0.02 * window:
                return


async def measure(calls: dict[str, tuple[int, Call]], args: argparse.Namespace) -> dict[str, Meter]:
    """Each call (name → (server pid, call)) `args.warmup` times untimed, then
    `args.rounds` times timed; interleaved call by call, so that whatever else the
    machine does weighs on each of them alike. After each call its server is let go
    idle, so what it does after answering (freeing a large read, closing a session)
    does not land in the next call's time."""
    meters = {name: Meter(pid) for name, (pid, _) in calls.items()}
    for r in range(args.warmup + args.rounds):
        for name, (pid, call) in calls.items():
            meter = meters[name] if r >= args.warmup else Meter(pid)  # warm-ups: thrown away
            with trio.fail_after(600):
                count = await call(meter)
            meters[name].count = count
            await idle(pid)
    return meters


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_mib(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs) / (1 << 20)


class _Buffered:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buf = bytearray()  # appended in place: a multi-MiB answer is not copied per read

    async def _more(self) -> None:
        chunk = await self.stream.receive_some(1 << 20)
        if not chunk:
            raise SystemExit("the daemon closed the connection")
        self.buf += chunk

    async def until(self, sep: bytes) -> bytes:
        while (i := self.buf.find(sep)) < 0:
            await self._more()
        out = bytes(self.buf[:i])
        del self.buf[: i + len(sep)]
        return out

    async def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._more()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


class Http(_Buffered):
    """A keep-alive HTTP/1.1 connection to 127.0.0.1:port, opened again when the server
    ends it (`Connection: close`: hypercorn does after 1,000 requests) or may have (idle
    for 2 s: hypercorn closes one idle for 5 s). Call `ready()` before a timed request."""

    def __init__(self, stream: trio.SocketStream, port: int) -> None:
        super().__init__(stream)
        self.port = port
        self.closing = False
        self.last = trio.current_time()

    async def ready(self) -> None:
        if self.closing or trio.current_time() - self.last > 2:
            await self.stream.aclose()
            self.stream, self.buf, self.closing = await trio.open_tcp_stream("127.0.0.1", self.port), bytearray(), False

    @classmethod
    async def connect(cls, port: int) -> Http:
        return cls(await trio.open_tcp_stream("127.0.0.1", port), port)

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, port: int) -> AsyncIterator[Http]:
        http = await cls.connect(port)
        try:
            yield http
        finally:
            await http.aclose()

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def request(self, method: str, path: str, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]:
        await self.ready()
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        await self.stream.send_all(head.encode() + body)
        lines = (await self.until(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        self.closing = fields.get("connection", "").lower() == "close"
        status = int(lines[0].split()[1])
        if "content-length" in fields:
            body = await self.take(int(fields["content-length"]))
        else:
            parts = []  # chunked (RFC 9112 §7.1), no trailers
            while size := int((await self.until(b"\r\n")).split(b";")[0], 16):
                parts.append(await self.take(size))
                await self.take(2)
            await self.take(2)
            body = b"".join(parts)
        self.last = trio.current_time()
        return status, body

    async def json(self, method: str, path: str, doc: Any = None) -> Any:
        body = json.dumps(doc).encode() if doc is not None else b""
        status, reply = await self.request(method, path, body, (("Content-Type", "application/json"),) if body else ())
        if status != 200:
            raise SystemExit(f"{method} {path}: HTTP {status} {reply[:300]!r}")
        return json.loads(reply)


def rpc(method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def a2a_result(status: int, body: bytes) -> Any:
    reply = json.loads(body)
    if status != 200 or "error" in reply:
        raise SystemExit(f"A2A call failed: HTTP {status} {body[:300]!r}")
    return reply["result"]


def send_body(text: str = "hello", context: str | None = None) -> bytes:
    """A blocking A2A 1.0 `SendMessage` (blocking is the default: `returnImmediately` false)."""
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    if context is not None:
        message["contextId"] = context
    return rpc("SendMessage", {"message": message})


def frame(event: str, **data: Any) -> str:
    return json.dumps({"event": event, "data": data})


async def until_frame(ws: WebSocketConnection, event: str) -> str:
    """Read frames until one named `event`; a `system:error` ends the bench."""
    tag = f'"{event}"'
    while True:
        m = await ws.get_message()
        head = m[:40]
        if tag in head:
            return m  # type: ignore[return-value]
        if '"system:error"' in head:
            raise SystemExit(f"/ws: {m[:300]}")


class AcpLines(_Buffered):
    """Newline-delimited JSON-RPC over the daemon's ACP unix socket (after its route preamble)."""

    @classmethod
    async def connect(cls, path: str, route: str) -> AcpLines:
        self = cls(await trio.open_unix_socket(path))
        await self.stream.send_all(json.dumps({"route": route}).encode() + b"\n")
        ack = json.loads(await self.until(b"\n"))
        if not ack.get("ok"):
            raise SystemExit(f"ACP socket: {ack}")
        await self.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        return self

    async def send(self, id: int, method: str, params: Any) -> None:
        await self.stream.send_all(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n")

    async def answer(self, id: int) -> tuple[Any, int]:
        """(the response to `id`, how many `session/update` notifications came before it)."""
        updates = 0
        while True:
            start = 0
            while (end := self.buf.find(b"\n", start)) >= 0:
                line, start = self.buf[start:end], end + 1
                if b'"session/update"' in line:  # counted, not decoded: the client stays out of the timing
                    updates += 1
                    continue
                msg = json.loads(line)
                if msg.get("id") == id:
                    del self.buf[:start]
                    if "error" in msg:
                        raise SystemExit(f"ACP: {msg['error']}")
                    return msg["result"], updates
            del self.buf[:start]
            await self._more()

    async def call(self, id: int, method: str, params: Any) -> Any:
        await self.send(id, method, params)
        return (await self.answer(id))[0]
