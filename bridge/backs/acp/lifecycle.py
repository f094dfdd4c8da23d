"""An ACP agent's life: spawned, initialized, its stderr logged, and ended with all it started.

The agent is spawned with `trio.run_process` in a nursery its owner passes in (the
session's, or the daemon's for a multiplexed agent), in a new session so it leads its
own process group, then initialized (ACP, Initialization: `initialize`, and
`authenticate` when the route names an auth method). Ending it ends everything it
started (DESIGN.md, complaint 10): `session/close` for its sessions if it advertised
that, EOF on its stdin, SIGTERM to the group, `kill_grace_s`, SIGKILL; and once the
agent has exited, whatever is left of its group gets the same. Its stderr is logged a
line at a time with the bridge session ids it serves.

`AgentLifecycle` is the base of `AgentProcess` (bridge/backs/acp/process.py), which
talks ACP on the pipes: it provides `call` and the hooks below (`_connect`, `_abandon`,
`_close_input`, `_farewell`, `label`).
"""

from __future__ import annotations

import logging
import os
import subprocess
from typing import Any

import msgspec
import trio

from bridge import __version__
from bridge.backs.base import TaskSpawner
from bridge.codecs import safejson
from bridge.codecs.jsonrpc import Reply
from bridge.backs.acp.config import AcpBackConfig as AcpBack
from bridge.errors import BackError, BackUnavailable
from bridge.schema import acp
from bridge.transport.procgroup import describe_exit, kill_group

__all__ = ["AgentLifecycle", "InitResult"]

log = logging.getLogger("bridge.backs.acp.back")
agent_log = logging.getLogger("bridge.backs.acp.back.agent")  # the agents' own stderr

_LOG_LINE = 2000  # characters of one stderr line kept in the log


# Lenient reads of what the agent answers: a missing optional field must not turn a
# working agent into a protocol error (the shared Structs are stricter).
class Capabilities(msgspec.Struct, kw_only=True, rename="camel"):
    load_session: bool = False
    session_capabilities: dict[str, Any] = {}
    prompt_capabilities: dict[str, Any] = {}


class InitResult(msgspec.Struct, kw_only=True, rename="camel"):
    protocol_version: Any = None
    agent_capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    auth_methods: list[dict[str, Any]] = []
    agent_info: dict[str, Any] | None = None


# Total decoder (bridge/codecs/safejson.py): an agent's garbage is its error, never ours.
_init_decoder = safejson.Decoder(InitResult)


class AgentLifecycle:
    """A running agent's process: spawn it with `start`, end it with `stop`."""

    def __init__(
        self,
        *,
        route: str,
        cfg: AcpBack,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        client_caps: acp.ClientCapabilities,
        owner: str,
    ) -> None:
        self.route = route
        self.cfg = cfg
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.client_caps = client_caps
        self.owner = owner  # the session that spawned it, for logs until sessions register
        self.init = InitResult()
        self.pid: int | None = None
        self.dead: str | None = None  # why it stopped, once it has
        self.returncode: int | None = None
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._finished = trio.Event()
        self._stderr_done = trio.Event()
        self._stdout_done = trio.Event()
        self._exited = trio.Event()

    # -- what the ACP connection provides ---------------------------------------------
    def label(self) -> str:
        """Who it serves, for logs."""
        return f"route {self.route} session {self.owner}"

    async def call(self, method: str, params: Any) -> Reply:
        """Send a request and wait for its reply."""
        raise NotImplementedError

    def _connect(self, proc: trio.Process, nursery: trio.Nursery) -> None:
        """Start talking to the agent on its stdin and stdout, in `nursery`."""
        raise NotImplementedError

    def _abandon(self) -> None:
        """The agent is gone: fail what waits for its answer."""

    def _close_input(self) -> None:
        """The agent exited: let what writes to its stdin end."""

    def _farewell(self) -> bytes:
        """What to write to its stdin before EOF when it is ended (b"": nothing)."""
        return b""

    # -- start ------------------------------------------------------------------------
    async def start(self, *, nursery: trio.Nursery | TaskSpawner) -> InitResult:
        """Spawn the agent in `nursery`, then `initialize` (and `authenticate`)."""
        await nursery.start(self._host)
        if self.dead is not None:
            raise BackUnavailable(f"route {self.route}: cannot start the agent {self.argv[0]!r}: {self.dead}")
        try:
            with trio.fail_after(self.cfg.startup_timeout_s):
                await self._handshake()
        except trio.TooSlowError:
            await self.stop()
            raise BackUnavailable(
                f"route {self.route}: the agent did not finish initialize within startup_timeout_s "
                f"({self.cfg.startup_timeout_s:g} s)"
            ) from None
        except BackError:
            await self.stop()
            raise
        return self.init

    async def _handshake(self) -> None:
        params = acp.InitializeParams(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=self.client_caps,
            client_info=acp.Implementation(name="agent-bridge", version=__version__),
        )
        reply = await self.call("initialize", params)
        if reply.error is not None:
            raise BackUnavailable(f"route {self.route}: the agent refused initialize: {reply.error.message}")
        try:
            self.init = _init_decoder.decode(reply.result or b"null")
        except msgspec.ValidationError as exc:
            raise BackUnavailable(f"route {self.route}: the agent's initialize result is invalid: {exc}") from exc
        version = self.init.protocol_version
        if version != acp.PROTOCOL_VERSION or type(version) is not int:
            # ACP, Initialization: the client disconnects on a version it does not speak.
            raise BackUnavailable(
                f"route {self.route}: the agent answered initialize with protocolVersion {version!r}; "
                f"the bridge speaks ACP protocol version {acp.PROTOCOL_VERSION} only"
            )
        method = self.cfg.auth_method
        if method is not None:
            offered = [m.get("id") for m in self.init.auth_methods]
            if offered and method not in offered:
                log.warning("route %s: auth_method %r is not among the agent's %s", self.route, method, offered)
            reply = await self.call("authenticate", acp.AuthenticateParams(method_id=method))
            if reply.error is not None:
                raise BackUnavailable(
                    f"route {self.route}: authenticate with method {method!r} failed: {reply.error.message}"
                )

    # -- the process ------------------------------------------------------------------
    async def _host(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Owns the process and its tasks; never raises into its owner's nursery."""
        pgid: int | None = None
        started = False
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                try:
                    proc: trio.Process = await nursery.start(self._run)
                except OSError as exc:
                    self._die(exc.strerror or str(exc))
                    return
                self.pid = pgid = proc.pid
                log.info("route %s: agent %s started (pid %d) for session %s", self.route, self.argv[0], proc.pid, self.owner)
                assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
                self._connect(proc, nursery)
                nursery.start_soon(self._stderr, proc.stderr)
                task_status.started()
                started = True
        except Exception as exc:  # the process boundary: our bug, never the owner's crash
            log.exception("route %s: agent connection failed", self.route)
            self._die(f"internal error: {exc!r}")
        finally:
            self._die("stopped")
            if pgid is not None:
                with trio.move_on_after(self.cfg.kill_grace_s + 2, shield=True):
                    await kill_group(pgid, self.cfg.kill_grace_s)
            self._finished.set()
            if not started:
                task_status.started()

    async def _run(self, *, task_status: trio.TaskStatus[trio.Process]) -> None:
        done = await trio.run_process(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group, ended as a whole
            check=False,
            deliver_cancel=self._deliver_cancel,
            task_status=task_status,
        )
        # It exited. Whatever it wrote before is still in the pipe: let the reader take
        # it (a child of the agent may hold stdout open, so this is bounded), then fail
        # what still waits for an answer, and end what is left of its group.
        self.returncode = done.returncode
        self._exited.set()
        with trio.move_on_after(0.5):
            await self._stdout_done.wait()
        self._die(describe_exit(done.returncode))
        log.log(
            logging.INFO if done.returncode == 0 else logging.WARNING,
            "%s: the agent (pid %s) %s", self.label(), self.pid, self.dead,
        )  # fmt: skip
        self._close_input()  # the writer ends
        # Its last words on stderr are often the reason it died: let them reach the log.
        with trio.move_on_after(1.0):
            await self._stderr_done.wait()
        assert self._scope is not None
        self._scope.cancel()

    async def _output_ended(self) -> None:
        """The reader saw the end of the agent's stdout: it should exit; end it if it does not."""
        self._stdout_done.set()
        with trio.move_on_after(self.cfg.kill_grace_s):
            await self._exited.wait()
            return  # `_run` reports the exit
        log.warning("%s: the agent closed its stdout but runs on; ending it", self.label())
        self._die("closed its output")
        assert self._scope is not None
        self._scope.cancel()

    async def _deliver_cancel(self, proc: trio.Process) -> None:
        """How the agent is ended when its owner stops (runs shielded until it exits)."""
        lines = self._farewell()
        if lines:
            try:
                os.write(proc.stdin.fileno(), lines)  # type: ignore[union-attr]
            except (OSError, AttributeError):
                pass
        if proc.stdin is not None:
            try:
                await proc.stdin.aclose()  # EOF: agents exit when their client goes away
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.sleep(min(0.5, self.cfg.kill_grace_s))
        await kill_group(proc.pid, self.cfg.kill_grace_s)

    async def stop(self) -> None:
        """End the agent and wait until it and its group are gone (bounded)."""
        if self._scope is not None:
            self._scope.cancel()
        with trio.move_on_after(self.cfg.kill_grace_s * 2 + 3, shield=True):
            await self._finished.wait()

    def _die(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
        self._abandon()

    # -- stderr -----------------------------------------------------------------------
    async def _stderr(self, stream: trio.abc.ReceiveStream) -> None:
        tail = b""
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if tail.strip():
                    self._log_stderr(tail)
                self._stderr_done.set()
                return
            tail += data
            *lines, tail = tail.split(b"\n")
            if len(tail) > _LOG_LINE * 4:
                lines.append(tail)
                tail = b""
            for line in lines:
                if line.strip():
                    self._log_stderr(line)

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if len(text) > _LOG_LINE:
            text = text[:_LOG_LINE] + f"… ({len(text)} chars)"
        agent_log.info("%s pid %s: %s", self.label(), self.pid, text)
