"""Owners of turns: which process may close a turn left with no end.

Each open store is an owner (bridge/store/base.py: who may close a cut turn), a random id
whose file `owners/<id>` in the state directory it holds an exclusive `flock` on
until it closes; every turn row it writes names it. A turn with no end is closed at
start-up only if its owner's file is gone or its lock can be taken: the kernel drops
a lock with its process however that process ended (`kill -9` included), and a pid
could be reused by another process, a lock cannot. So two editors each running
`agent-bridge acp` on one state directory never close each other's running turns.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid

__all__ = ["OWNERS_DIRNAME", "claim_owner", "is_owner_name", "release_owner", "sweep_owners", "take_gone_owner"]

OWNERS_DIRNAME = "owners"


def claim_owner(state_dir: str) -> tuple[str, int]:
    """A new owner id and the descriptor of its file, locked for as long as it is open."""
    owners = os.path.join(state_dir, OWNERS_DIRNAME)
    os.makedirs(owners, mode=0o700, exist_ok=True)
    owner = uuid.uuid4().hex
    # Locked under a name no sweeper looks at, then renamed into place: a file named
    # as an owner is always either locked by it or left by a process that is gone.
    hidden = os.path.join(owners, f".{owner}")
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh file: never contended
        os.rename(hidden, os.path.join(owners, owner))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(hidden)
        raise
    return owner, fd


def is_owner_name(name: str) -> bool:
    return len(name) == 32 and all(ch in "0123456789abcdef" for ch in name)  # a name, never a path


def take_gone_owner(state_dir: str, owner: str | None) -> int | None:
    """-1 if `owner` is gone with no file left (or a row from before owners: schema 1,
    written by a process an upgrade restarted), the locked descriptor of its file if it
    is gone, None if it still runs (its lock is held)."""
    if owner is None or not is_owner_name(owner):
        return -1
    try:
        fd = os.open(os.path.join(state_dir, OWNERS_DIRNAME, owner), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def release_owner(state_dir: str, owner: str, fd: int) -> None:
    """Remove a held owner file, then unlock it: removed while still locked, so nobody
    can lock a file that is about to go and believe its owner alive."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(state_dir, OWNERS_DIRNAME, owner))
    finally:
        os.close(fd)


def sweep_owners(state_dir: str, me: str | None, taken: dict[str, int]) -> None:
    """Remove the files of every gone owner (those in `taken` are held already), so
    each `kill -9` leaves no file behind for long. Safe whether or not their turns
    were closed: a missing file reads as a gone owner too."""
    try:
        names = os.listdir(os.path.join(state_dir, OWNERS_DIRNAME))
    except FileNotFoundError:
        names = []
    for name in names:
        if name == me or not is_owner_name(name):
            continue
        fd = taken.pop(name, None)
        if fd is None:
            fd = take_gone_owner(state_dir, name)
        if fd is not None and fd >= 0:
            release_owner(state_dir, name, fd)
    for name, fd in taken.items():  # already gone from the directory
        release_owner(state_dir, name, fd)
