"""Ending a process group as a whole: SIGTERM, a grace period, SIGKILL.

Agents and the terminals the ACP back runs start in a new session, so each leads
its own process group; ending the group ends whatever they started too (DESIGN.md,
complaint 10). Zombies do not count as alive: they are gone, only not yet reaped.
"""

from __future__ import annotations

import os
import signal

import trio

__all__ = ["describe_exit", "group_alive", "kill_group"]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, wait up to `grace` for it to go, then SIGKILL what is left."""
    if not group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    with trio.move_on_after(grace):
        while group_alive(pgid):
            await trio.sleep(0.05)
        return
    _signal_group(pgid, signal.SIGKILL)
    with trio.move_on_after(1.0):
        while group_alive(pgid):
            await trio.sleep(0.02)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "is not running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
