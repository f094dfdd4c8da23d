"""Who may do what with a route's sessions: rules over an `Identity`'s claims, as pure data.

`[routes.NAME.access]` (README: "Access control") says who may start sessions on the
route, and who may list, watch, use (prompt, cancel) and answer the questions of
sessions that someone else owns. A session's owner is the `Identity.key` of the caller
that created it (kept in the session's stored `meta`, `OWNER_META`); its owner may do
everything with it as long as it may still start sessions on the route.

Without an access table a route works as before rules existed: every caller the front
let in may do everything. A session stored with no owner (made before owners were
recorded) is treated as shared, as it was.

A rule matches a claim: `{claim = "groups", contains = "ops"}` (a list holding the value,
or a string of space-separated words holding it, like OAuth's `scope`, RFC 8693 §4.2),
`{claim = "sub", equals = "alice"}`. `sub` and `iss` are the identity's own subject and
issuer when the claims do not carry them, `via` how it was established ("jwt", "token",
"unix", "anonymous"). A caller may do a thing when any rule of its list matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from bridge.core.identity import Identity

__all__ = ["OWNER_META", "Action", "Rule", "RouteAccess", "may", "owner_of"]

# What a caller does with a session: see it in a listing, watch it (subscribe, read its
# history and events), use it (prompt, cancel, set options), answer its questions.
Action = Literal["start", "list", "watch", "use", "answer"]

# The key in `SessionRecord.meta` (and `Session.meta`) naming the owner's `Identity.key`.
OWNER_META = "owner"


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    claim: str
    equals: str | None = None
    contains: str | None = None

    def __post_init__(self) -> None:
        if (self.equals is None) == (self.contains is None):
            raise ValueError(f"a rule on {self.claim!r} needs exactly one of `equals`, `contains`")

    def matches(self, identity: Identity) -> bool:
        value = _claim(identity, self.claim)
        if self.equals is not None:
            if isinstance(value, bool):  # as JSON writes it: `equals = "true"`
                return ("true" if value else "false") == self.equals
            return isinstance(value, str | int) and str(value) == self.equals
        if isinstance(value, str):
            return self.contains in value.split()
        if isinstance(value, list | tuple):
            return any(isinstance(v, str) and v == self.contains for v in value)
        return False


class RouteAccess(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`[routes.NAME.access]`. `start` empty: anyone let in may start sessions; each
    other list empty: only the owner may do that with a session."""

    start: list[Rule] = []
    listing: list[Rule] = msgspec.field(default_factory=list, name="list")
    watch: list[Rule] = []
    use: list[Rule] = []
    answer: list[Rule] = []


def _claim(identity: Identity, name: str) -> Any:
    if name == "via":
        return identity.via
    value = identity.claims.get(name) if isinstance(identity.claims, Mapping) else None
    if value is None and name == "sub":
        return identity.subject
    if value is None and name == "iss":
        return identity.issuer
    return value


def owner_of(meta: Mapping[str, Any] | None) -> str | None:
    """The owner key kept in a session's meta; None when none was recorded."""
    owner = meta.get(OWNER_META) if meta else None
    return owner if isinstance(owner, str) and owner else None  # "" is nobody (the store's unowned)


def may(access: RouteAccess | None, identity: Identity, action: Action, owner: str | None = None) -> bool:
    """Whether `identity` may do `action` with a session owned by `owner` (for "start":
    with the route). Total: no rule or claim shape raises."""
    if access is None:
        return True
    starts = not access.start or any(r.matches(identity) for r in access.start)
    if action == "start":
        return starts
    if owner is None or owner == identity.key:
        return starts
    rules: list[Rule] = access.listing if action == "list" else getattr(access, action)
    return any(r.matches(identity) for r in rules)
