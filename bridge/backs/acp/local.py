"""Files and terminals the ACP back serves itself, confined to the route's cwd.

When no ACP editor offers `fs/*` and `terminal/*` (ACP, File System and Terminals), a route may
serve them here (`fs = "read" | "cwd"`, `terminal = true`). Every path is resolved
(`os.path.realpath`: `..` and symlinks) and must stay inside the root; anything
else is refused with Forbidden. The agent runs as the same user and could reach
the files itself: confinement limits what the *bridge* does on its behalf, so a
route's policy means what it says.

File I/O runs in worker threads, which trio cannot cancel, so nothing that can block
for ever is ever opened: only regular files are read or written (a FIFO, socket,
device or directory is refused as invalid params, checked with `lstat` before the open
and `fstat` after it, the open itself non-blocking); each call is bounded by the
route's `fs_timeout_s`, after which the thread is abandoned and the agent told; and
the threads come from one small limiter (`FS_THREADS`), so agents can never take
trio's default threads that DNS look-ups and the store's other work need.

Terminals run without a shell, each in its own process group, in the session's
nursery; their output is kept up to a byte limit (the oldest bytes are dropped,
at a character boundary, as ACP asks) and they are ended with the session.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import uuid
from functools import partial
from typing import Any

import msgspec
import trio

from bridge.transport.procgroup import kill_group
from bridge.codecs.jsonrpc import decode_params
from bridge.errors import Forbidden, InvalidParams, NotFound, Overloaded

__all__ = ["FS_THREADS", "LocalFiles", "LocalTerminals", "confine", "fs_limiter"]

FS_THREADS = 8  # worker threads for agents' file reads and writes, all routes together
_fs_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("bridge_fs_limiter")
# O_NONBLOCK: opening a FIFO never waits for its other end (it is refused right after);
# O_NOFOLLOW: a symlink swapped in after `confine` is refused, not followed.
_OPEN = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def fs_limiter() -> trio.CapacityLimiter:
    """The one limiter of file threads in this trio run (trio's own default is 40)."""
    try:
        return _fs_limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(FS_THREADS)
        _fs_limiter.set(limiter)
        return limiter


def _regular(st: os.stat_result, shown: str) -> None:
    # A symlink is left to the open: O_NOFOLLOW refuses it (Forbidden, as `confine` does).
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise InvalidParams(f"{shown!r} is not a regular file")


def confine(root: str, path: Any) -> str:
    """`path` resolved, if it lies inside `root` (itself already resolved); else Forbidden.

    Relative paths are taken from `root`. The result has no symlink and no `..` left.
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise InvalidParams(f"invalid path {path!r}")
    real = os.path.realpath(os.path.join(root, path))
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise Forbidden(f"{path!r} is outside the route's working directory {root}")
    return real


class _Read(msgspec.Struct, rename="camel"):
    path: str
    line: int | None = None
    limit: int | None = None


class _Write(msgspec.Struct, rename="camel"):
    path: str
    content: str


class _EnvVar(msgspec.Struct):
    name: str
    value: str


class _Create(msgspec.Struct, rename="camel"):
    command: str
    args: list[str] = []
    env: list[_EnvVar] = []
    cwd: str | None = None
    output_byte_limit: int | None = None


class _TerminalRef(msgspec.Struct, rename="camel"):
    terminal_id: str


class LocalFiles:
    """`fs/read_text_file` and (if `writable`) `fs/write_text_file` inside `root`."""

    def __init__(self, root: str, *, writable: bool, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.root = os.path.realpath(root)
        self.writable = writable
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _in_thread(self, what: str, fn: Any, *args: Any) -> Any:
        # The route's fs_timeout_s bounds the wait for a thread and the call itself; a
        # thread past it is abandoned (it still holds its limiter token until it ends).
        with trio.move_on_after(self.timeout_s):
            return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True, limiter=fs_limiter())
        raise Overloaded(f"{what} did not finish within fs_timeout_s ({self.timeout_s:g} s)")

    async def read(self, params: msgspec.Raw | None) -> dict[str, Any]:
        p = decode_params(params, _Read)
        real = confine(self.root, p.path)
        if p.line is not None and p.line < 1 or p.limit is not None and p.limit < 0:
            raise InvalidParams("line starts at 1 and limit is not negative")
        text = await self._in_thread(f"reading {p.path!r}", self._read, real, p.path)
        if p.line is not None or p.limit is not None:
            lines = text.splitlines(keepends=True)
            start = (p.line or 1) - 1
            text = "".join(lines[start : None if p.limit is None else start + p.limit])
        return {"content": text}

    def _read(self, real: str, shown: str) -> str:
        try:
            _regular(os.lstat(real), shown)  # a device is not even opened
            fd = os.open(real, os.O_RDONLY | _OPEN)
        except FileNotFoundError:
            raise NotFound(f"no file {shown!r}") from None
        except OSError as exc:
            raise Forbidden(f"cannot read {shown!r}: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            _regular(st, shown)  # what was opened, whatever was there at lstat
            data = f.read(self.max_bytes + 1) if st.st_size <= self.max_bytes else None
        if data is None or len(data) > self.max_bytes:
            raise InvalidParams(f"{shown!r} is larger than {self.max_bytes} bytes; read it with line and limit")
        return data.decode("utf-8", "replace")

    async def write(self, params: msgspec.Raw | None) -> None:
        p = decode_params(params, _Write)
        if not self.writable:
            raise Forbidden("this route serves files read-only (fs = \"read\")")
        real = confine(self.root, p.path)
        if real == self.root:
            raise InvalidParams(f"{p.path!r} is the working directory itself")
        await self._in_thread(f"writing {p.path!r}", self._write, real, p.path, p.content)

    def _write(self, real: str, shown: str, content: str) -> None:
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            try:
                _regular(os.lstat(real), shown)
            except FileNotFoundError:
                pass  # a new file
            # No O_TRUNC: what was opened is checked first, and only a regular file is cut.
            fd = os.open(real, os.O_WRONLY | os.O_CREAT | _OPEN, 0o644)
        except OSError as exc:
            raise Forbidden(f"cannot write {shown!r}: {exc.strerror}") from exc
        with os.fdopen(fd, "wb") as f:
            _regular(os.fstat(fd), shown)
            f.truncate(0)
            f.write(content.encode("utf-8"))


class _Terminal:
    __slots__ = ("id", "limit", "output", "truncated", "returncode", "done", "scope")

    def __init__(self, limit: int) -> None:
        self.id = "term-" + uuid.uuid4().hex[:12]
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.returncode: int | None = None
        self.done = trio.Event()
        self.scope: trio.CancelScope | None = None

    def add(self, data: bytes | bytearray) -> None:
        self.output += data
        excess = len(self.output) - self.limit
        if excess > 0:
            del self.output[:excess]
            # Drop UTF-8 continuation bytes so the kept output starts at a character.
            while self.output and (self.output[0] & 0xC0) == 0x80:
                del self.output[:1]
            self.truncated = True

    def exit_status(self) -> dict[str, Any] | None:
        code = self.returncode
        if code is None:
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return {"exitCode": None, "signal": name}
        return {"exitCode": code, "signal": None}


class LocalTerminals:
    """`terminal/*` inside `root`: commands without a shell, output bounded."""

    def __init__(self, root: str, *, env: dict[str, str], limit: int, max_count: int, grace: float) -> None:
        self.root = os.path.realpath(root)
        self.env = env
        self.limit = limit
        self.max_count = max_count
        self.grace = grace
        self.terminals: dict[str, _Terminal] = {}

    async def call(self, method: str, params: msgspec.Raw | None, *, nursery: trio.Nursery) -> Any:
        if method == "terminal/create":
            return await self._create(decode_params(params, _Create), nursery)
        term = self.terminals.get(decode_params(params, _TerminalRef).terminal_id)
        if term is None:
            raise NotFound("unknown terminal")
        if method == "terminal/output":
            out: dict[str, Any] = {"output": term.output.decode("utf-8", "replace"), "truncated": term.truncated}
            status = term.exit_status()
            if status is not None:
                out["exitStatus"] = status
            return out
        if method == "terminal/wait_for_exit":
            await term.done.wait()
            return term.exit_status()
        if method in ("terminal/kill", "terminal/release"):
            if term.scope is not None:
                term.scope.cancel()
            with trio.move_on_after(self.grace + 2):
                await term.done.wait()
            if method == "terminal/release":
                self.terminals.pop(term.id, None)
            return {}
        raise NotFound(f"unknown terminal method {method}")

    async def _create(self, p: _Create, nursery: trio.Nursery) -> dict[str, Any]:
        if len(self.terminals) >= self.max_count:
            raise Forbidden(f"at most {self.max_count} terminals per session; release one first")
        cwd = confine(self.root, p.cwd or self.root)
        limit = min(p.output_byte_limit or self.limit, self.limit)
        env = dict(self.env)
        env.update({v.name: v.value for v in p.env})
        term = _Terminal(max(limit, 0))
        error = await nursery.start(self._run, term, [p.command, *p.args], cwd, env)
        if error is not None:
            raise InvalidParams(f"cannot run {p.command!r}: {error}")
        self.terminals[term.id] = term
        return {"terminalId": term.id}

    async def _run(
        self, term: _Terminal, argv: list[str], cwd: str, env: dict[str, str], *, task_status: trio.TaskStatus[str | None]
    ) -> None:
        proc: trio.Process | None = None
        try:
            async with trio.open_nursery() as n:
                term.scope = n.cancel_scope
                try:
                    proc = await n.start(
                        partial(
                            trio.run_process,
                            argv,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            cwd=cwd,
                            env=env,
                            start_new_session=True,
                            check=False,
                            deliver_cancel=lambda p: kill_group(p.pid, self.grace),
                        )
                    )
                except OSError as exc:
                    task_status.started(exc.strerror or str(exc))
                    return
                task_status.started(None)
                assert proc is not None and proc.stdout is not None
                async for data in proc.stdout:
                    term.add(data)
        finally:
            if proc is not None:
                term.returncode = proc.returncode
                with trio.move_on_after(self.grace + 2, shield=True):
                    await kill_group(proc.pid, self.grace)
            term.done.set()
