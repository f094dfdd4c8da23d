"""systemd integration without a compiled dependency: `sd_notify` and `sd_listen_fds`.

Notification (sd_notify(3)): one datagram of `KEY=VALUE` lines to the unix socket
named by `$NOTIFY_SOCKET` (a leading `@` is the abstract namespace). Without that
variable every call is a no-op, so the same code runs under systemd and without it.
The daemon sends `READY=1` once every listener is bound and the store is open,
`STATUS=...` as things change, `RELOADING=1` + `MONOTONIC_USEC=` then `READY=1`
around a reload, `STOPPING=1` on shutdown, and `WATCHDOG=1` every half of
`$WATCHDOG_USEC` from a task of the main trio loop, so that a wedged loop stops the
pings and systemd restarts the service (sd_watchdog_enabled(3)).

Socket activation (sd_listen_fds(3)): `$LISTEN_PID` must be our pid; the
`$LISTEN_FDS` descriptors start at 3 and `$LISTEN_FDNAMES` names them
(colon-separated). The variables are removed once read, so no child sees them, and
the descriptors are made close-on-exec.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import trio

__all__ = ["ActivatedSocket", "Notifier", "listen_fds", "monotonic_usec"]

log = logging.getLogger("bridge.systemd")

SD_LISTEN_FDS_START = 3


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in µs, what `MONOTONIC_USEC=` carries (sd_notify(3), RELOADING=1)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """Sends sd_notify datagrams; a no-op when the service manager did not ask for them."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        """From `environ`; without one, from our environment, whose variables are then
        removed (sd_notify's unset_environment) so that no agent we spawn inherits them."""
        env = dict(os.environ) if environ is None else environ
        if environ is None:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(key, None)
        self.address: str | None = None
        raw = env.get("NOTIFY_SOCKET") or None
        if raw is not None:
            # Abstract namespace sockets are written with a leading '@' (sd_notify(3)).
            self.address = "\0" + raw[1:] if raw.startswith("@") else raw
        self._sock: socket.socket | None = None
        self.watchdog_s: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_s = int(usec) / 1e6

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """One datagram; True if it was sent. Never blocks, never raises."""
        if self.address is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(payload, self.address)
        except OSError as exc:
            # systemd gone or the socket full: the service goes on; systemd will notice.
            log.debug("sd_notify to %s failed: %s", self.address, exc)
            return False
        return True

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def reloading(self, status: str = "reloading the configuration") -> None:
        self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}", f"STATUS={status}")

    def stopping(self, status: str = "stopping") -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    async def watchdog(self) -> None:
        """Ping at half the watchdog period, from the main loop; returns if there is none."""
        if self.watchdog_s is None or self.address is None:
            return
        interval = self.watchdog_s / 2
        while True:
            self.send("WATCHDOG=1")
            await trio.sleep(interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


@dataclass(frozen=True)
class ActivatedSocket:
    fd: int
    name: str  # from $LISTEN_FDNAMES; "unknown" when not named
    family: int  # socket.AF_UNIX, AF_INET, AF_INET6 (-1 if not a socket)
    listening: bool

    @property
    def kind(self) -> str:
        """"acp" or "http": by name when systemd gives one we know, else by family."""
        if self.name in ("acp", "http"):
            return self.name
        return "acp" if self.family == socket.AF_UNIX else "http"


def listen_fds(environ: MutableMapping[str, str] | None = None, *, unset: bool = True) -> list[ActivatedSocket]:
    """The sockets systemd passed us (empty if none, or if they were meant for another pid)."""
    env = os.environ if environ is None else environ
    pid, count, names = env.get("LISTEN_PID", ""), env.get("LISTEN_FDS", ""), env.get("LISTEN_FDNAMES", "")
    if unset:
        for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            env.pop(key, None)
    if not pid.isdigit() or int(pid) != os.getpid() or not count.isdigit():
        return []
    labels = names.split(":") if names else []
    found: list[ActivatedSocket] = []
    for i in range(int(count)):
        fd = SD_LISTEN_FDS_START + i
        try:
            os.set_inheritable(fd, False)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                log.warning("socket activation: descriptor %d is not a socket; ignored", fd)
                continue
            probe = socket.socket(fileno=fd)
            try:
                family = probe.family
                listening = bool(probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            finally:
                probe.detach()  # the descriptor stays open: it is the listener's
        except OSError as exc:
            log.warning("socket activation: descriptor %d unusable: %s", fd, exc)
            continue
        found.append(ActivatedSocket(fd=fd, name=labels[i] if i < len(labels) else "unknown", family=family, listening=listening))
    return found
