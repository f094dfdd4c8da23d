"""How a back row or a front column carries each kind: in full, degraded (with the
reason and what the user sees instead), or not at all (with the reason).

The expected `Seen` of a cell is `front.carry(kind, back.carry(kind, kind.expect))`:
what the back's protocol keeps of the kind, then what the front's protocol shows of
that. README's compatibility matrix is rendered from these same tables
(tests/matrix/readme.py), so the documentation cannot drift from what is tested.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import msgspec

from tests.matrix.kinds import Seen


class Full(msgspec.Struct, frozen=True):
    note: str = ""  # how it is carried, when that is worth saying (shown in README)


class Degraded(msgspec.Struct, frozen=True):
    reason: str  # why, and what the user gets instead (shown in README)
    shows: Callable[[Seen], Seen]  # the Seen a user gets instead


class Absent(msgspec.Struct, frozen=True):
    """The protocol cannot carry the kind at all: the cell is not run, README says why."""

    reason: str


Carry = Full | Degraded | Absent


class BackRow(Protocol):
    """One back of the matrix: an agent behind a route of the daemon under test."""

    name: str  # the route name too: [routes.<name>]
    title: str  # for README ("ACP agent on the official Python SDK")
    carries: dict[str, Carry]  # by kind name; a kind missing here is Full

    def start(self, tmp: Path) -> AbstractAsyncContextManager[str]:
        """Start the row's peer (in its own process, on 127.0.0.1) for the whole matrix
        run and yield the body of its route table: the TOML lines that go under
        `[routes.<name>]` (back kind, url or command, ...)."""
        ...


def carry(table: dict[str, Carry], kind: str) -> Carry:
    return table.get(kind, Full())


__all__ = ["Absent", "AsyncIterator", "BackRow", "Carry", "Degraded", "Full", "carry"]
