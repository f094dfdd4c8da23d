"""What the web console's browser tests and bench share: Chromium, a daemon, artifacts.

- `chromium()`: the path of Debian's Chromium (`chromium` on the PATH, or
  `AGENT_BRIDGE_CHROMIUM`); a clear failure, never a skip, when it is missing.
- `launch(playwright)`: that Chromium, headless, through Playwright for Python (its own
  browser downloads are never used).
- `serve(tmp_path, config)`: the real `agent-bridge serve` for synchronous code
  (Playwright's sync API), yielding a `Served` (its URL, ACP socket, log).
- `ARTIFACTS`: where screenshots go (`test-artifacts/console/`, not in git).
- `Api`: the daemon's REST API through httpx, with its bearer token if any.
- `Relay`: a TCP relay in front of the daemon whose connections the test can cut, as an
  unlucky network would (a browser's own offline mode leaves an open stream alone).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import struct
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from daemon_support import toml

__all__ = ["ARTIFACTS", "Api", "Relay", "Served", "chromium", "launch", "serve"]

TESTS = Path(__file__).resolve().parent
ARTIFACTS = TESTS.parent / "test-artifacts" / "console"
BRIDGE = Path(sys.executable).with_name("agent-bridge")

# Headless, no first-run chores, nothing fetched from the network by the browser itself.
_ARGS = [
    "--headless=new",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str:
    path = os.environ.get("AGENT_BRIDGE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "the console's browser tests need Debian's chromium (apt-get install chromium; .ci/run does it)"
    return path


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium(), args=_ARGS)


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, acp_socket: str | None, log: Path) -> None:
        self.proc, self.url, self.acp_socket, self.log = proc, url, acp_socket, log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def serve(
    tmp_path: Path, config: dict[str, Any] | str, *, env: dict[str, str] | None = None, name: str = "daemon"
) -> Iterator[Served]:
    """`agent-bridge serve` on `config` (a dict, or TOML text as is), until its
    `listening` line; SIGTERM at the end."""
    path = tmp_path / f"{name}.toml"
    path.write_text(config if isinstance(config, str) else toml(config))
    log = tmp_path / f"{name}.log"
    command = [str(BRIDGE), "serve", "--config", str(path), "--state-dir", str(tmp_path / f"{name}-state")]
    with log.open("ab") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        line = b""
        deadline = time.monotonic() + 30
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            assert left > 0 and select.select([proc.stdout], [], [], left)[0], f"no listening line: {log.read_text()}"
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"the daemon exited: {log.read_text(errors='replace')}"
            line += chunk
        words = line.split(b"\n")[0].decode().split()
        assert words[0] == "listening", words
        url = next(w for w in words if w.startswith("http://"))
        unix = next((w.removeprefix("unix:") for w in words if w.startswith("unix:")), None)
        yield Served(proc, url, unix, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Api:
    """The REST API of a served daemon, as a script would call it."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def close(self) -> None:
        self.http.close()

    def json(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json()

    def events(self, session_id: str, **params: Any) -> list[dict[str, Any]]:
        """The stored canonical events of a session, read to the end of its history
        (`through` = its last event), parsed from the SSE stream."""
        import json

        from bridge.codecs.sse import SSEDecoder

        info = self.json("GET", f"/api/sessions/{session_id}")
        params.setdefault("through", info["last_seq"])
        decoder = SSEDecoder()
        events: list[dict[str, Any]] = []
        with self.http.stream("GET", f"/api/sessions/{session_id}/events", params=params) as response:
            assert response.status_code == 200, response.read()
            for chunk in response.iter_bytes():
                for event in decoder.feed(chunk):
                    if event.event not in ("caught_up", "gone"):  # (the id of an SSE event lasts past it)
                        events.append(json.loads(event.data))
        return events

    def wait_status(self, session_id: str, statuses: set[str], timeout: float = 60) -> dict[str, Any]:
        """Until the session's status is one of `statuses`, through the change feed."""
        info = self.json("GET", f"/api/sessions/{session_id}")
        if info["status"] in statuses:
            return info
        import json

        from bridge.codecs.sse import SSEDecoder

        decoder = SSEDecoder()
        deadline = time.monotonic() + timeout
        with self.http.stream("GET", "/api/changes", timeout=timeout) as response:
            info = self.json("GET", f"/api/sessions/{session_id}")  # subscribed: nothing is missed now
            if info["status"] in statuses:
                return info
            for chunk in response.iter_bytes():
                for event in decoder.feed(chunk):
                    if event.event == "session" and event.data:
                        data = json.loads(event.data)
                        if data["session_id"] == session_id and data["status"] in statuses:
                            return data
                assert time.monotonic() < deadline, f"session {session_id} never reached {statuses}"
        raise AssertionError(f"the change feed ended before session {session_id} reached {statuses}")


class Relay:
    """127.0.0.1:PORT → the daemon, byte for byte, one pair of threads per connection;
    `cut()` resets every connection open now (new ones are relayed as before)."""

    def __init__(self, target_url: str) -> None:
        host, port = target_url.removeprefix("http://").rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            cut, self.open = self.open, set()
        for sock in cut:
            with contextlib.suppress(OSError):
                # SO_LINGER 0: a reset, not a polite close, as when a network path dies;
                # the shutdown wakes the thread reading it (a close alone would not).
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()
