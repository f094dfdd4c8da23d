"""What a reload may take back: streams kept open on an access decision.

A front that keeps something open on what the rules allowed when it opened (the
canonical events stream of a session, a /ws subscription, an A2A task's stream, an ACP
connection's attached session, a change feed's view of the list) holds a grant here: a
`check` of a configuration, which returns the refusal it would now meet (None: still
allowed), and a `revoke`, which ends that thing in its protocol's way with that refusal.

`SessionManager.reconfigure` (a SIGHUP reload, bridge/reload.py) runs every check
against the new configuration before it returns, so no event of a turn reaches a caller
the new rules refuse once the reload is applied: a stream stops what it was replaying
when it is revoked, and one being opened as the reload came is checked as it is held
(bridge/fronts/owners.py `hold`). Both run synchronously and must not block; one that
raises is our bug: logged, its grant dropped (a view's is kept, for the next reload),
the others still run (STYLE.md rule 17). Holding and releasing a grant is a dict
operation: a stream pays nothing per event for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Check", "Grants", "Refusals", "Revoke"]

log = logging.getLogger("bridge.session")

Check = Callable[[Any], BaseException | None]  # a Config → the refusal it would meet now, or None
Revoke = Callable[[BaseException], None]


class Refusals(Exception):
    """What one check over many things (a front's subscriptions) found refused, for its
    revoke: (what, the refusal) pairs."""

    def __init__(self, refused: list[tuple[Any, BaseException]]) -> None:
        super().__init__(f"{len(refused)} refused")
        self.refused = refused


class Grants:
    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[object, tuple[Check, Revoke, bool]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, check: Check, revoke: Revoke, *, once: bool = True) -> Callable[[], None]:
        """Recheck on every reload until the returned function is called (idempotent),
        or until it is revoked once; with `once=False` (what adjusts rather than ends: a
        front's view of its many subscriptions, a listing), on every reload after too."""
        key = object()
        self._held[key] = (check, revoke, once)
        return lambda: self._held.pop(key, None) and None

    def recheck(self, config: Any) -> int:
        """Revoke every grant `config` refuses; returns how many were revoked."""
        revoked = 0
        for key, (check, revoke, once) in list(self._held.items()):
            if key not in self._held:  # released by an earlier revoke
                continue
            try:
                refusal = check(config)
                if refusal is None:
                    continue
                if once:
                    del self._held[key]
                revoke(refusal)
                revoked += 1
            except Exception:
                if once:  # a view (`once=False`) stays: dropping it would end every recheck of its front
                    self._held.pop(key, None)
                log.exception("a grant's check or revoke failed%s", "; dropped" if once else "")
        return revoked
