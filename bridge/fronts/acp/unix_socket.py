"""The ACP front on the daemon's unix socket: what `agent-bridge acp --connect` reaches.

One connection per editor. Before ACP starts, the client sends one line naming the
route, `{"route": "NAME"}` (`null` for the default route), and we answer one line,
`{"ok": true, "route": "NAME"}` or `{"error": "why"}` (then close); after that the
connection is served by `AcpConnection` exactly as stdio is (bridge/shim.py has the
client side). The route is looked up in the configuration in force when the editor
connects, so a reload applies to the next connection.

Shutdown, in two steps the daemon drives: `stop_accepting()` closes the accept loop
(connections open stay served), and `finish(timeout)` half-closes every connection's
read side: each then ends the way it does at an editor's EOF (queued answers,
`cancelled` included, are written, then its sessions are let go).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
import struct
from typing import Any

import msgspec
import trio

from bridge.codecs import safejson
from bridge.core.identity import ANONYMOUS, Identity
from bridge.fronts import owners
from bridge.fronts.acp.front import AcpConnection
from bridge.session import SessionManager

__all__ = ["AcpSocketFront", "bind_unix"]

log = logging.getLogger("bridge.fronts.acp.unix_socket")

_PREAMBLE_TIMEOUT_S = 10.0
_MAX_PREAMBLE = 4096


class _Preamble(msgspec.Struct):
    route: str | None = None


_preamble = safejson.Decoder(_Preamble)  # any bytes: a value or DecodeError


def bind_unix(path: str, mode: int) -> tuple[socket.socket, int]:
    """A listening unix socket at `path` with `mode`, and the descriptor of the lock
    (`PATH.lock`, flock) that says it is ours: keep it open while serving. A socket
    locked by another daemon is an error (EADDRINUSE); an unlocked one is stale
    (its daemon died) and is replaced."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    st = os.stat(parent)
    if st.st_uid != os.getuid() and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        # Anyone may replace a file there: the socket would not stay ours.
        raise OSError(errno.EPERM, f"{parent} is writable by others and not ours")
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise OSError(errno.EADDRINUSE, f"another daemon is listening on {path}") from None
    try:
        return _bind_locked(path, mode), lock
    except BaseException:
        os.close(lock)
        raise


def _bind_locked(path: str, mode: int) -> socket.socket:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        os.unlink(path)  # we hold the lock: left by a daemon that died
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old = os.umask(0o777 & ~mode)  # created with `mode` at once: no window with looser rights
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(128)
    return sock


class _Prefixed(trio.abc.ReceiveStream):
    """A receive stream that first yields bytes already read past the preamble."""

    def __init__(self, first: bytes, stream: trio.SocketStream) -> None:
        self.first = first
        self.stream = stream

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.first:
            data, self.first = self.first, b""
            return data
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


class AcpSocketFront:
    def __init__(self, manager: SessionManager, *, metrics: Any = None) -> None:
        self.manager = manager
        self.metrics = metrics
        self.streams: set[trio.SocketStream] = set()
        self._accept_scope = trio.CancelScope()
        self._conn_nursery: trio.Nursery | None = None
        self._idle = trio.Event()

    async def serve(self, sock: socket.socket, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept on `sock` (listening) until `stop_accepting`; return when every connection ended."""
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        async with trio.open_nursery() as conns:
            self._conn_nursery = conns
            task_status.started()
            with self._accept_scope:
                await trio.serve_listeners(self._handle, [listener], handler_nursery=conns)
            await listener.aclose()

    def stop_accepting(self) -> None:
        self._accept_scope.cancel()

    async def finish(self, timeout_s: float) -> None:
        """End every connection as at an editor's EOF; cut off what is left after `timeout_s`."""
        for stream in list(self.streams):
            try:
                stream.socket.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        with trio.move_on_after(timeout_s):
            while self.streams:
                self._idle = trio.Event()
                await self._idle.wait()
        if self._conn_nursery is not None:
            self._conn_nursery.cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.streams.add(stream)
        if self.metrics is not None:
            self.metrics.connection_opened("acp")
        try:
            async with stream:
                await self._serve_one(stream)
        except trio.BrokenResourceError:
            log.info("ACP socket client went away")
        except Exception:
            # The supervising boundary of one connection (STYLE.md rule 17): whatever
            # it raises is our bug, logged, and ends this connection only, never the
            # accept loop or the daemon.
            log.exception("ACP socket connection failed")
        finally:
            self.streams.discard(stream)
            if self.metrics is not None:
                self.metrics.connection_closed("acp")
            if not self.streams:
                self._idle.set()

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        buf = b""
        with trio.move_on_after(_PREAMBLE_TIMEOUT_S):
            while b"\n" not in buf and len(buf) <= _MAX_PREAMBLE:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                buf += chunk
        line, newline, rest = buf.partition(b"\n")
        if not newline:
            await _answer(stream, {"error": f'send one line {{"route": NAME}} first (within {_PREAMBLE_TIMEOUT_S:g} s, at most {_MAX_PREAMBLE} bytes)'})
            return
        config = self.manager.config  # the configuration in force now (reloads apply to new connections)
        try:
            route = _preamble.decode(line).route
        except msgspec.DecodeError as exc:
            await _answer(stream, {"error": f'the first line must be {{"route": NAME}}: {exc}'})
            return
        name = route or config.default_route or (next(iter(config.routes)) if len(config.routes) == 1 else None)
        if name is None or name not in config.routes:
            what = f"no route named {route!r}" if route else "no route named and no default_route"
            await _answer(stream, {"error": f"{what}; routes are: {', '.join(sorted(config.routes))}"})
            return
        if not self.manager.accepting:
            await _answer(stream, {"error": self.manager.refusal})
            return
        who = peer_identity(stream.socket)
        await _answer(stream, {"ok": True, "route": name})
        log.info("ACP client connected on the unix socket (%s)", who.subject, extra={"route": name})
        conn = AcpConnection(_Prefixed(rest, stream), stream, manager=self.manager, config=config, route=name, identity=who)
        await conn.run()


def peer_identity(sock: Any) -> Identity:
    """The connecting process's Unix user (SO_PEERCRED, socket(7)): who the kernel says
    it is, whatever it claims; its user name when the system knows one, else its uid."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
    except (OSError, AttributeError, struct.error):  # not Linux, or not a unix socket
        return ANONYMOUS
    return owners.unix_identity(uid)


async def _answer(stream: trio.SocketStream, body: dict[str, Any]) -> None:
    if "error" in body:
        log.warning("ACP socket client refused: %s", body["error"])
    await stream.send_all(msgspec.json.encode(body) + b"\n")
