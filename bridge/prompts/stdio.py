"""The process of a stdio MCP prompt source: started and stopped with trio, without the SDK.

`spawn` starts the server with `trio.run_process` in the nursery its owner passes
(STYLE.md rule 18), in a session of its own so that stopping it ends whatever it
started (DESIGN.md, complaint 10). The registry spawns a source's first process before
the `mcp` SDK has finished loading (in a worker thread), so the two start-ups overlap.

`stop` follows MCP's stdio shutdown (MCP 2025-11-25, Lifecycle: Shutdown): close its stdin, wait, then
SIGTERM and SIGKILL its process group. The environment is a minimal one (PATH, HOME,
USER, ...) plus the source's `env`, whose secret values are read now and never logged.
"""

from __future__ import annotations

import os
import subprocess
from functools import partial

import trio

from bridge.transport.procgroup import kill_group
from bridge.errors import PromptError
from bridge.logs import add_secret
from bridge.prompts.config import PromptSource, SecretRef

__all__ = ["secret", "spawn", "stop"]

_INHERITED = ("HOME", "LANG", "LC_ALL", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR", "USER")
_STDIN_GRACE_S = 2.0  # after its stdin closes, how long the server gets to exit by itself
_KILL_GRACE_S = 2.0  # SIGTERM → SIGKILL


def secret(value: str | SecretRef, what: str) -> str:
    """A literal, or the value a SecretRef points at (registered for log redaction)."""
    if isinstance(value, str):
        return value
    got = value.read()
    if got is None:
        raise PromptError(f"{what}: {'$' + value.env if value.env else value.file} gives no value")
    add_secret(got[len(value.prefix) :])
    return got


async def spawn(cfg: PromptSource, nursery: trio.Nursery) -> trio.Process:
    """Start the source's server; PromptError when it cannot be started."""
    assert cfg.command is not None
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env |= {k: secret(v, f"prompt source {cfg.name}: env {k}") for k, v in cfg.env.items()}
    run = partial(
        trio.run_process,
        list(cfg.command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,  # its log lines join ours on stderr
        env=env,
        cwd=cfg.cwd,
        start_new_session=True,
        check=False,
    )
    try:
        process: trio.Process = await nursery.start(run)
    except OSError as exc:
        raise PromptError(f"cannot start {cfg.command[0]!r}: {exc.strerror or exc}") from exc
    return process


async def stop(process: trio.Process) -> None:
    """Close its stdin, give it time to exit, then end its process group. Shielded, bounded."""
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            try:
                await process.stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        with trio.move_on_after(_STDIN_GRACE_S):
            await process.wait()
        await kill_group(process.pid, _KILL_GRACE_S)  # its pid leads its group (start_new_session)
        with trio.move_on_after(_KILL_GRACE_S):
            await process.wait()
