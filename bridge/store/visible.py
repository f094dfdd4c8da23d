"""One caller's view of the sessions in a listing (issue 20), as pure data for the stores.

Made by the fronts from the routes' access rules (bridge/fronts/owners.py `visibility`)
and applied by every store in its query (bridge/store/listing.py `visible_sql`) or, in
the memory store, record by record (`Visible.shows`).
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Sees", "Visible"]

# What a route lets one caller see: every session, its own (and unowned ones), others'
# only (it may list others' sessions but not start its own), or none.
Sees = Literal["all", "own", "others", "none"]


class Visible(msgspec.Struct, frozen=True, kw_only=True):
    """Which sessions one caller sees in a listing (made by bridge/fronts/owners.py
    `visibility`). A route in no set (one that is not configured) shows it its own and
    unowned sessions."""

    owner: str  # the caller's identity key: the sessions it owns
    every: tuple[str, ...] = ()  # routes whose every session it sees
    others: tuple[str, ...] = ()  # routes where it sees others' sessions but not its own
    hidden: tuple[str, ...] = ()  # routes where it sees none

    def sees(self, route: str) -> Sees:
        if route in self.every:
            return "all"
        if route in self.others:
            return "others"
        return "none" if route in self.hidden else "own"

    def shows(self, route: str, owner: str | None) -> bool:
        """Whether a session of `route` owned by `owner` (None: unowned) is listed."""
        sees = self.sees(route)
        own = owner is None or owner == "" or owner == self.owner
        return sees == "all" or (sees == "own" and own) or (sees == "others" and not own)
