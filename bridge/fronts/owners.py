"""Access rules at the fronts: who owns a session, and whether a caller may touch it.

Every front asks here, with the caller's `Identity` (bridge/core/identity.py: from the
ASGI scope on HTTP fronts, the connection on /ws, the socket peer on ACP) and the
session's record, before it lists, watches, uses or answers a session; the rules
themselves are pure (bridge/core/access.py, `[routes.NAME.access]`).

A caller that may neither watch nor list a session is told it does not exist
(NotFound, the same answer as for an id nobody has), so ids of others' sessions are not
confirmed; one that may watch but not do the thing asked gets Forbidden.

Listings are filtered in the store's query (`visibility`, bridge/store/listing.py
`Visible`), so a page is full and its total counts only what the caller may see. Once
any route has rules, a session of a route that is no longer configured is its owner's
only (as on a route whose table is empty).

What stays open on a check (a stream of a session's events, a /ws subscription, an A2A
task's stream, an ACP connection's session) is held with `hold`: a reload whose rules
refuse its caller ends it (bridge/session/grants.py), with the refusal a new request
would meet.
"""

from __future__ import annotations

import functools
import pwd
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from bridge.config import Config
from bridge.core.access import OWNER_META, Action, RouteAccess, may, owner_of
from bridge.core.identity import Identity
from bridge.errors import Forbidden, NotFound
from bridge.store.listing import Visible

__all__ = ["check", "check_start", "get_checked", "hold", "owned_by", "refusal", "ruled", "unix_identity", "usable", "visibility", "visible"]

# The rules of a route that is not configured (any more), once others have rules.
_UNCONFIGURED = RouteAccess()

_R = TypeVar("_R")


def ruled(config: Config) -> bool:
    """Whether any route has an access table (else no check needs the stored record)."""
    return any(r.access is not None for r in config.routes.values())


def _access(config: Config, route: str) -> RouteAccess | None:
    found = config.routes.get(route)
    if found is not None:
        return found.access
    return _UNCONFIGURED if ruled(config) else None


def visibility(config: Config, identity: Identity) -> Visible | None:
    """What `identity` sees in a listing, for the store's query; None (everything) when
    no route has rules, so a listing costs what it did before rules existed."""
    if not ruled(config):
        return None
    every: list[str] = []
    others: list[str] = []
    hidden: list[str] = []
    for name, route in sorted(config.routes.items()):
        access = route.access
        if access is None:
            every.append(name)
            continue
        own = may(access, identity, "start")
        theirs = any(rule.matches(identity) for rule in access.listing)
        if own and theirs:
            every.append(name)
        elif theirs:
            others.append(name)
        elif not own:
            hidden.append(name)
    return Visible(owner=identity.key, every=tuple(every), others=tuple(others), hidden=tuple(hidden))


def usable(config: Config, identity: Identity, route: str) -> bool:
    """Whether `identity` may do anything on `route`: start sessions, or list, watch, use
    or answer others'. A route it may not is left out of what it is shown of the routes
    (`/api/routes`, MCP `tools/list`)."""
    found = config.routes.get(route)
    if found is None or found.access is None:
        return found is not None
    access = found.access
    if may(access, identity, "start"):
        return True
    return any(rule.matches(identity) for rules in (access.listing, access.watch, access.use, access.answer) for rule in rules)


def owned_by(identity: Identity, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new session's meta, naming its owner."""
    return {**(meta or {}), OWNER_META: identity.key}


def check_start(config: Config, route: str, identity: Identity) -> None:
    """Forbidden unless `identity` may start sessions on `route`."""
    found = config.routes.get(route)
    if found is not None and not may(found.access, identity, "start"):
        raise Forbidden(f"{identity.subject!r} may not start sessions on route {route!r}")


def check(config: Config, record: Any, identity: Identity, action: Action) -> None:
    """NotFound or Forbidden unless `identity` may do `action` with the session of `record`
    (a SessionRecord: its `route`, `session_id` and `meta`)."""
    access = _access(config, record.route)
    if access is None:
        return
    owner = owner_of(record.meta)
    if may(access, identity, action, owner):
        return
    if action not in ("watch", "list") and (may(access, identity, "watch", owner) or may(access, identity, "list", owner)):
        raise Forbidden(f"{identity.subject!r} may not {action} session {record.session_id}")
    raise NotFound(f"unknown session {record.session_id!r}")


async def get_checked(manager: Any, session_id: str, identity: Identity, action: Action) -> Any:
    """`manager.get(session_id)` once `identity` may do `action` with it. The check reads
    the stored record first, so a refused caller never starts someone else's session
    (nor its back)."""
    if ruled(manager.config):
        live = manager.live(session_id)
        record = live.record if live is not None else await manager.store.get_session(session_id)
        if record is None:
            raise NotFound(f"unknown session {session_id!r}")
        check(manager.config, record, identity, action)
    session = await manager.get(session_id)
    check(manager.config, session.record, identity, action)  # a reload may have come meanwhile
    return session


def hold(
    manager: Any, record: Any, identity: Identity, actions: tuple[Action, ...], revoke: Callable[[BaseException], None]
) -> Callable[[], None]:
    """Until the returned function is called: when a reload's rules refuse `identity`
    every one of `actions` on the session of `record` (those that could have opened
    it), `revoke(refusal)` ends what was opened on it, in its protocol's way. Checked
    at once too: a reload that came while it was being opened (after its request was
    checked) ends it now."""
    check = functools.partial(_refused, record, identity, actions)
    release = manager.grants.hold(check, revoke)
    refusal = check(manager.config)
    if refusal is not None:
        release()
        revoke(refusal)
    return release


def _refused(record: Any, identity: Identity, actions: tuple[Action, ...], config: Config) -> BaseException | None:
    return refusal(config, record, identity, *actions)


def refusal(config: Config, record: Any, identity: Identity, *actions: Action) -> BaseException | None:
    """None when `identity` may do any of `actions` with the session of `record`; else
    what `check` raises for the first (NotFound, Forbidden)."""
    first: BaseException | None = None
    for action in actions:
        try:
            check(config, record, identity, action)
        except (NotFound, Forbidden) as exc:
            first = first or exc
            continue
        return None
    return first


def visible(config: Config, records: Iterable[_R], identity: Identity) -> list[_R]:
    """The records `identity` may see in a listing (one by one: a listing asks the store
    with `visibility` instead)."""
    out: list[_R] = []
    for record in records:
        access = _access(config, record.route)  # type: ignore[attr-defined]
        if access is None or may(access, identity, "list", owner_of(record.meta)):  # type: ignore[attr-defined]
            out.append(record)
    return out


def unix_identity(uid: int) -> Identity:
    """A Unix user as a caller (an ACP socket peer, or the user who started a stdio
    front): its name when the system knows one, else its uid."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Identity(subject=name, via="unix", claims={"uid": uid})
