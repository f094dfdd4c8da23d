"""`agent-bridge acp ROUTE --connect [PATH]`: relay an editor's stdio to the daemon.

The sessions, agent processes and secrets live in the daemon (`agent-bridge serve`);
this process only moves bytes, so it starts in the time it takes to import the
standard library, and an editor that restarts finds its sessions there (`session/load`).

The unix socket protocol, one connection per editor:
1. we send one line, `{"route": "NAME"}` (`null`: the daemon's default route);
2. the daemon answers one line, `{"ok": true, "route": "NAME"}` or `{"error": "why"}`;
3. then both sides speak ACP (newline-delimited JSON-RPC) as on stdio. The editor
   never sees the two preamble lines.

If the daemon is not there (or refuses the route), the editor still gets an answer:
every request it sends is answered with a JSON-RPC error saying so, until it closes
stdin; nothing hangs. If the daemon goes away mid-conversation we exit (69,
EX_UNAVAILABLE), as an agent process that died would.

Which socket: PATH, else `$AGENT_BRIDGE_SOCKET`, else the first that exists of the
daemon's default (`default_socket_path`) and the system service's
`/run/agent-bridge/acp.sock`. Imports: the standard library and bridge.errors only.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["SYSTEM_SOCKET", "default_socket_path", "run", "socket_candidates"]

SYSTEM_SOCKET = "/run/agent-bridge/acp.sock"
EX_OK = 0
EX_UNAVAILABLE = 69
_ACK_TIMEOUT_S = 15.0
_MAX_PREAMBLE = 64 * 1024
_READ = 1 << 20


def default_socket_path(environ: Mapping[str, str] | None = None) -> str:
    """Where `agent-bridge serve` puts its ACP socket when the config names none."""
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY")  # systemd RuntimeDirectory= (maybe a list)
    if runtime:
        return os.path.join(runtime.split(":")[0], "acp.sock")
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        return os.path.join(xdg, "agent-bridge", "acp.sock")
    return os.path.join(tempfile.gettempdir(), f"agent-bridge-{os.getuid()}", "acp.sock")


def socket_candidates(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    if env.get("AGENT_BRIDGE_SOCKET"):
        return [env["AGENT_BRIDGE_SOCKET"]]
    out: list[str] = []
    for path in (default_socket_path({k: v for k, v in env.items() if k != "RUNTIME_DIRECTORY"}), SYSTEM_SOCKET):
        if path not in out:
            out.append(path)
    return out


def _connect(paths: list[str]) -> tuple[socket.socket | None, str]:
    reasons = []
    existing = [p for p in paths if os.path.exists(p)] or paths
    for path in existing:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            reasons.append(f"{path}: {exc.strerror or exc}")
            continue
        return sock, path
    return None, "; ".join(reasons)


def _read_ack(sock: socket.socket) -> tuple[dict[str, Any] | None, bytes]:
    """The daemon's preamble answer and whatever came after it."""
    buf = b""
    sock.settimeout(_ACK_TIMEOUT_S)
    try:
        while b"\n" not in buf and len(buf) < _MAX_PREAMBLE:
            chunk = sock.recv(4096)
            if not chunk:
                return None, b""
            buf += chunk
    except OSError:
        return None, b""
    finally:
        sock.settimeout(None)
    line, _, rest = buf.partition(b"\n")
    try:
        ack = json.loads(line)
    except ValueError:
        return None, b""
    return (ack if isinstance(ack, dict) else None), rest


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _refuse(message: str, stdin_fd: int, stdout_fd: int) -> int:
    """Answer every request with `message` as a JSON-RPC error until the editor closes stdin."""
    from bridge.errors import BackUnavailable, codes_for

    code = codes_for(BackUnavailable(message)).jsonrpc
    print(f"agent-bridge: {message}", file=sys.stderr, flush=True)
    buf = b""
    while True:
        try:
            data = os.read(stdin_fd, 65536)
        except OSError:
            data = b""
        buf += data
        *lines, buf = buf.split(b"\n")
        if not data and buf:
            lines.append(buf)
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and "method" in msg and msg.get("id") is not None:
                reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": code, "message": message}}
                try:
                    _write_all(stdout_fd, json.dumps(reply).encode() + b"\n")
                except OSError:
                    return EX_UNAVAILABLE
        if not data:
            return EX_UNAVAILABLE


def _pump_in(sock: socket.socket, stdin_fd: int, done: threading.Event) -> None:
    """Editor → daemon; on EOF, half-close so the daemon ends the connection as on stdio EOF."""
    try:
        while True:
            data = os.read(stdin_fd, _READ)
            if not data:
                break
            sock.sendall(data)
    except OSError:
        pass
    finally:
        done.set()
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def run(route: str | None, path: str | None, *, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Relay until both sides are done; the exit status."""
    paths = [path] if path else socket_candidates()
    sock, where = _connect(paths)
    if sock is None:
        hint = "start it (systemctl start agent-bridge, or agent-bridge serve), or run without --connect"
        return _refuse(f"the agent-bridge daemon is not running: cannot connect to {where} ({hint})", stdin_fd, stdout_fd)
    with sock:
        try:
            sock.sendall(json.dumps({"route": route}).encode() + b"\n")
        except OSError as exc:
            return _refuse(f"the agent-bridge daemon at {where} closed the connection: {exc.strerror}", stdin_fd, stdout_fd)
        ack, rest = _read_ack(sock)
        if ack is None:
            return _refuse(f"the agent-bridge daemon at {where} did not answer", stdin_fd, stdout_fd)
        if not ack.get("ok"):
            return _refuse(f"the agent-bridge daemon refused: {ack.get('error', 'no reason given')}", stdin_fd, stdout_fd)
        editor_done = threading.Event()
        threading.Thread(target=_pump_in, args=(sock, stdin_fd, editor_done), daemon=True).start()
        try:
            if rest:
                _write_all(stdout_fd, rest)
            while True:
                data = sock.recv(_READ)
                if not data:
                    break
                _write_all(stdout_fd, data)
        except BrokenPipeError:
            return EX_OK  # the editor is gone
        except OSError:
            pass
    if editor_done.is_set():
        return EX_OK
    print(f"agent-bridge: the daemon at {where} closed the connection", file=sys.stderr, flush=True)
    return EX_UNAVAILABLE
