"""A connection's outgoing queue: one writer drains it in batches (STYLE.md rule 13).

Producers `put` without awaiting (the session delivers events synchronously); the
bound is enforced by backpressure: above `max_items` the outbox is *congested*, and
well-behaved producers (`Session._flow`, the connection's reader) wait in
`wait_uncongested` until the writer has drained it. The writer awaits one item, takes
everything waiting, and writes it with one `send_all`: it batches under load and adds
no latency when idle.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import trio

__all__ = ["Outbox"]


class Outbox:
    __slots__ = ("max_items", "_items", "_readable", "_reader_waiting", "_drained", "_closed")

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._items: deque[Any] = deque()
        self._readable = trio.lowlevel.ParkingLot()
        self._reader_waiting = False  # a plain flag: ParkingLot's len() is a Python call per put
        self._drained = trio.lowlevel.ParkingLot()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        if self._closed:
            return  # the peer is gone; nothing more can reach it
        self._items.append(item)
        if self._reader_waiting:
            self._reader_waiting = False
            self._readable.unpark()

    def congested(self) -> bool:
        return len(self._items) >= self.max_items and not self._closed

    async def wait_uncongested(self) -> None:
        while self.congested():
            await self._drained.park()

    async def take(self) -> list[Any]:
        """Everything waiting (at least one item); [] once closed and empty."""
        while not self._items:
            if self._closed:
                return []
            self._reader_waiting = True
            await self._readable.park()
        items = list(self._items)
        self._items.clear()
        self._drained.unpark_all()
        return items

    def close(self) -> None:
        self._closed = True
        self._readable.unpark_all()
        self._drained.unpark_all()
