"""The HTTP listener's connection boundary: one connection's fault ends that connection.

hypercorn's trio worker runs every accepted TCP connection as a `TCPServer` task in
one nursery shared by all of them (`worker_serve`'s server nursery, through
`trio.serve_listeners`). It catches what the ASGI app raises (`task_group._handle`
logs it and answers 500 or close 1011), but not what its own protocol code raises
(h11, wsproto, `WSStream` and its message buffer, the app task's final `send`):
such an exception leaves `TCPServer.run`, fails the shared nursery and then
`serve`, and the daemon exits with every client's connection.

`serve` here is hypercorn's, with each connection run under a supervising boundary
(STYLE.md rule 17): whatever one connection raises, an exception or a group of
them, is logged at ERROR with its traceback (a fault in our server is our bug, rule
10), that client gets the last word its protocol allows if the fault came from
reading (an open WebSocket: close 1011; an HTTP/1.1 request not yet answered: 500,
both from bridge/errors.py), and its socket is closed. Cancellation passes through.

hypercorn has no parameter for the connection handler; `worker_serve` looks
`TCPServer` up in its module's globals on each call, so that name is the seam: it is
replaced once by a subclass that only adds the boundary (QUIC's `UDPServer` is not
used: the daemon binds no `quic_bind`). The subclass also reads without hypercorn's
read timeout scope when no read timeout is set (`_read_until_closed`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.events import Closed, RawData
from hypercorn.trio import run as _hypercorn_run
from hypercorn.trio import serve as _hypercorn_serve
from hypercorn.trio.tcp_server import MAX_RECV as _MAX_RECV
from hypercorn.trio.tcp_server import TCPServer

from bridge.errors import codes_for

__all__ = ["serve"]

log = logging.getLogger("bridge.fronts.http")

# How long the failed connection's last word (a close frame, a 500) may take: it is
# written to a client we know nothing good about, so briefly, then the socket goes.
_LAST_WORD_S = 1.0


class _SupervisedTCPServer(TCPServer):
    """hypercorn's connection, ended alone (logged, last word, closed) on any fault."""

    async def run(self) -> None:
        peer = _peer(self.stream)
        try:
            await super().run()
        except Exception as exc:  # an ExceptionGroup of Exceptions too
            await self._end(peer, exc)
        except BaseExceptionGroup as group:  # faults alongside a cancellation
            faults, rest = group.split(Exception)
            if faults is not None:
                await self._end(peer, faults)
            if rest is not None:
                raise rest from None
        finally:
            # hypercorn's protocol holds our `protocol_send`, and we hold it: a cycle
            # that keeps the whole connection (h11, wsproto, buffers, ~20 KiB) until a
            # full collection. Its tasks have ended with `super().run()`; let it go.
            self.__dict__.pop("protocol", None)

    async def _read_data(self) -> None:
        try:
            if self.config.read_timeout:
                await super()._read_data()
            else:
                await self._read_until_closed()
        except Exception as exc:
            await self._last_word(exc)
            raise

    async def _read_until_closed(self) -> None:
        """hypercorn's `_read_data` (0.17, 0.18) without its `fail_after(read_timeout or
        inf)`: with no read timeout (the daemon sets none) that is a cancel scope that
        never fires, held by every connection for as long as it lives (about 1 KiB per
        idle WebSocket; memory per idle session, bench/ws_stream.py)."""
        while True:
            try:
                data = await self.stream.receive_some(_MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await self.protocol.handle(Closed())

    async def _end(self, peer: str, exc: BaseException) -> None:
        log.error("HTTP connection from %s failed inside the server (our bug); closed", peer, exc_info=exc)
        with trio.move_on_after(_LAST_WORD_S, shield=True):
            await self.stream.aclose()  # hypercorn's own close may not have run

    async def _last_word(self, exc: Exception) -> None:
        """The protocol's error for the client, if its state still allows one."""
        try:
            data = _error_bytes(getattr(self.protocol, "protocol", None), exc)
        except Exception:  # the protocol's state is what failed: say nothing
            log.debug("no last word for a failed connection", exc_info=True)
            return
        if not data:
            return
        with trio.move_on_after(_LAST_WORD_S, shield=True):
            try:
                async with self.send_lock:
                    await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the client is gone: nothing to tell it


def _error_bytes(protocol: Any, exc: Exception) -> bytes:
    """A close frame for an open WebSocket (RFC 6455 §7.4.1), or a whole HTTP/1.1
    error response for a request not yet answered (RFC 9110 §15.6.1); else nothing."""
    import h11
    from hypercorn.protocol.ws_stream import WSStream
    from wsproto.connection import ConnectionState
    from wsproto.events import CloseConnection

    codes = codes_for(exc)
    stream = getattr(protocol, "stream", None)
    if isinstance(stream, WSStream):
        conn = getattr(stream, "connection", None)
        if conn is not None and conn.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            stream.closed = True  # hypercorn writes nothing more on it
            return conn.send(CloseConnection(code=codes.ws_close, reason="internal error"))  # type: ignore[no-any-return]
        return b""
    conn = getattr(protocol, "connection", None)
    if isinstance(conn, h11.Connection) and conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
        head = h11.Response(status_code=codes.http, headers=[("content-length", "0"), ("connection", "close")])
        return conn.send(head) + conn.send(h11.EndOfMessage())  # type: ignore[operator]
    return b""


def _peer(stream: Any) -> str:
    sock = getattr(stream, "socket", None) or getattr(getattr(stream, "transport_stream", None), "socket", None)
    try:
        host, port = sock.getpeername()[:2]  # type: ignore[union-attr]
    except (OSError, AttributeError, TypeError, ValueError):
        return "an unknown peer"
    return f"{host}:{port}"


def _supervise_connections() -> None:
    if _hypercorn_run.TCPServer is not _SupervisedTCPServer:
        _hypercorn_run.TCPServer = _SupervisedTCPServer  # type: ignore[misc]


async def serve(app: Any, config: Any, **kwargs: Any) -> None:
    """`hypercorn.trio.serve`, every connection under the boundary above."""
    _supervise_connections()
    await _hypercorn_serve(app, config, **kwargs)
