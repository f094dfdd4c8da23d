"""The HTTP listener's connection (bridge/fronts/http_guard.py) on a socket pair, without a daemon.

hypercorn's `TCPServer` and its protocol point at each other (the protocol's `send` is
the server's `protocol_send`), so a finished connection, with its h11 and wsproto
state, stayed in memory until the cycle collector's next full pass: after a wave of
WebSocket clients left, RSS grew by their size with each wave (bench/ws_stream.py
`--reuse`). The supervised connection lets go of its protocol when it ends.
"""

from __future__ import annotations

import base64
import gc
import os
import socket
import struct
import weakref
from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.worker_context import WorkerContext

from bridge.fronts.http_guard import _SupervisedTCPServer
from daemon_support import ws_frame

CEILING_S = 10


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "websocket":
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    message = await receive()
    await send({"type": "websocket.send", "text": message.get("text") or ""})  # an echo
    assert (await receive())["type"] == "websocket.disconnect"


async def _read_until(stream: trio.SocketStream, needle: bytes, buf: bytes = b"") -> bytes:
    while needle not in buf:
        chunk = await stream.receive_some()
        assert chunk, buf
        buf += chunk
    return buf


async def test_a_finished_websocket_connection_is_freed_without_the_cycle_collector() -> None:
    ours, theirs = socket.socketpair()
    client = trio.SocketStream(trio.socket.from_stdlib_socket(theirs))
    server = _SupervisedTCPServer(
        ASGIWrapper(_app), Config(), WorkerContext(None), {}, trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    )
    key = base64.b64encode(os.urandom(16))
    gc.disable()
    try:
        with trio.fail_after(CEILING_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.run)
                await client.send_all(
                    b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
                )
                buf = await _read_until(client, b"\r\n\r\n")
                assert buf.startswith(b"HTTP/1.1 101"), buf
                await client.send_all(ws_frame(b"ping?"))
                await _read_until(client, b"ping?", buf.split(b"\r\n\r\n", 1)[1])
                await client.send_all(ws_frame(struct.pack("!H", 1000), 8))  # the closing handshake
                while await client.receive_some():  # to the server's end of the stream
                    pass
                await client.aclose()
            ref = weakref.ref(server)
            del server
            assert ref() is None, "the finished connection is still referenced (a reference cycle)"
    finally:
        gc.enable()
