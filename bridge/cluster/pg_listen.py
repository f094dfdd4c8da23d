"""PgCluster's LISTEN connection: one thread of its own, handing notifications to trio.

psycopg 3's async API runs on asyncio only, and the daemon runs on trio; like the
store's queries, waiting for notifications happens in a thread. This one blocks in
`Connection.notifies(timeout=...)` (so it sees a stop request within `POLL_S`; the
cluster also pokes its own channel to stop it at once) and hands each notification to
trio without waiting: it appends to a deque and schedules one `_drain` on the trio loop
(`TrioToken.run_sync_soon`) when the deque was empty, so a burst costs one hop. The
deque is bounded: when it is full the thread waits for trio to drain it (backpressure:
PostgreSQL queues notifications for a slow listener, nothing is lost).

A lost connection is opened again with a bounded backoff; then `deliver` gets
`RECONNECTED`, since notifications sent meanwhile are gone: readers re-read the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

import psycopg
import trio

from bridge.store.pg_conn import connect, translate

__all__ = ["RECONNECTED", "Listener", "Note"]

log = logging.getLogger("bridge.cluster")

Note = tuple[str, str]  # (channel, payload)
RECONNECTED: Note = ("", "reconnected")

POLL_S = 0.5  # how long one wait for notifications lasts before the stop flag is checked
KEEPALIVE_S = 5.0  # a silent connection is probed this often (a lost peer shows as an error)
BACKOFF_S = (0.05, 2.0)  # first and longest wait between reconnection attempts
MAX_PENDING = 4096  # notifications waiting for trio before the thread waits


class Listener:
    def __init__(self, url: str, channels: Sequence[str], deliver: Callable[[list[Note]], None]) -> None:
        self._url = url
        self._channels = list(channels)
        self._deliver = deliver  # called on the trio thread, must not raise
        self._token: trio.lowlevel.TrioToken | None = None
        self._conn: psycopg.Connection | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: deque[Note] = deque()
        self._scheduled = False
        self.reconnects = 0

    def connect(self) -> None:
        """The first connection, before the thread starts (blocking: run it in a thread);
        a database that cannot be reached raises the store's error for it (`Overloaded`)."""
        try:
            self._conn = self._open()
        except psycopg.Error as exc:
            raise translate(exc, self._url) from None

    def start(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._thread = threading.Thread(target=self._run, name="bridge-pg-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _open(self) -> psycopg.Connection:
        conn = connect(self._url)  # the store's timeouts and keepalives
        try:
            for channel in self._channels:
                conn.execute(f'LISTEN "{channel}"')  # channel names are checked identifiers (pg_sql.channel_of)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self) -> None:
        backoff = BACKOFF_S[0]
        try:
            while not self._stop.is_set():
                try:
                    if self._conn is None:
                        self._conn = self._open()
                        self.reconnects += 1
                        log.info("cluster: LISTEN connection open again")
                        self._put(RECONNECTED)
                        backoff = BACKOFF_S[0]
                    self._pump(self._conn)
                except psycopg.Error as exc:
                    if self._stop.is_set():
                        break
                    log.warning("cluster: LISTEN connection lost (%s); again in %.2f s", type(exc).__name__, backoff)
                    self._close()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_S[1])
        except trio.RunFinishedError:
            pass  # trio is gone: nobody to deliver to
        except Exception:  # our bug: the cluster hears nothing more, say so loudly
            log.exception("cluster: the LISTEN thread failed")
        finally:
            self._close()

    def _pump(self, conn: psycopg.Connection) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            for note in conn.notifies(timeout=POLL_S):
                last = time.monotonic()
                self._put((note.channel, note.payload))
                if self._stop.is_set():
                    return
            if time.monotonic() - last > KEEPALIVE_S:
                conn.execute("SELECT 1")  # raises when the server or the network is gone
                last = time.monotonic()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass  # already broken: nothing to close

    def _put(self, note: Note) -> None:
        assert self._token is not None
        with self._lock:
            self._pending.append(note)
            first, self._scheduled = not self._scheduled, True
            full = len(self._pending) >= MAX_PENDING
        if first:
            self._token.run_sync_soon(self._drain)
        if full:
            trio.from_thread.run_sync(self._drain, trio_token=self._token)

    def _drain(self) -> None:
        with self._lock:
            notes = list(self._pending)
            self._pending.clear()
            self._scheduled = False
        if notes:
            try:
                self._deliver(notes)
            except Exception:  # an exception here would end trio's run: contain it
                log.exception("cluster: failed to handle %d notifications", len(notes))
