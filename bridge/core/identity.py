"""Who is asking: the identity a front establishes for each request or connection.

Pure data. A front makes one from what its protocol carries (a bearer token checked
against a configured issuer or a static token, the Unix user of an ACP socket peer)
and keeps it beside the request; access rules, limits, session owners, audit lines and
outbound identity forwarding read it. Nothing here checks a credential.

HTTP fronts carry it in the ASGI scope under `SCOPE_KEY` (`of_scope` reads it, and a
request no front authenticated is `ANONYMOUS`).

`CALLER` is who is calling in the current task, and through which front: a front sets
it (`calling`) in the task that handles a client's request, so the session, which
knows no protocol, can say in its audit line who began each turn (it reads it once, as
the turn begins, in that same task).
"""

from __future__ import annotations

import contextvars
import pwd
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["ANONYMOUS", "CALLER", "SCOPE_KEY", "Identity", "Via", "calling", "of_scope", "unix_identity"]

# How the identity was established.
Via = Literal["anonymous", "token", "jwt", "unix"]

SCOPE_KEY = "agent_bridge.identity"


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """A caller: its subject, who vouched for it, and the claims it came with.

    `key` names the caller for limits and session ownership: two identities with the
    same issuer and subject are the same caller, whatever their claims.
    """

    subject: str
    via: Via = "anonymous"
    issuer: str = ""  # the JWT `iss`; "" for static tokens, Unix users and anonymous
    claims: Mapping[str, Any] = msgspec.field(default_factory=dict)
    # When the credential stops vouching for it (unix seconds: a JWT's `exp` plus the
    # issuer's clock skew); None: never. A long-lived connection ends then.
    expires_at: float | None = None

    @property
    def key(self) -> str:
        return f"{self.via}:{self.issuer}:{self.subject}"

    @property
    def anonymous(self) -> bool:
        return self.via == "anonymous"


ANONYMOUS = Identity(subject="anonymous")


def unix_identity(uid: int) -> Identity:
    """A Unix user as a caller (an ACP socket peer, or the user who started a stdio
    front): its name when the system knows one, else its uid."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Identity(subject=name, via="unix", claims={"uid": uid})


def of_scope(scope: Mapping[str, Any]) -> Identity:
    """The identity an HTTP front put in this ASGI scope, else `ANONYMOUS`."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, Identity) else ANONYMOUS


# (who, front) of the request the current task serves; ("anonymous", "") when none set it.
CALLER: contextvars.ContextVar[tuple[Identity, str]] = contextvars.ContextVar("agent_bridge_caller", default=(ANONYMOUS, ""))


def calling(identity: Identity, front: str) -> None:
    """Say who the current task serves, through which front (kept by the tasks it starts)."""
    CALLER.set((identity, front))
