"""Who is asking: the identity a front establishes for each request or connection.

Pure data. A front makes one from what its protocol carries (a bearer token checked
against a configured issuer or a static token, the Unix user of an ACP socket peer)
and keeps it beside the request; access rules, limits, session owners, audit lines and
outbound identity forwarding read it. Nothing here checks a credential.

HTTP fronts carry it in the ASGI scope under `SCOPE_KEY` (`of_scope` reads it, and a
request no front authenticated is `ANONYMOUS`).

A turn carries the identity and front that began it (`Session.begin_turn`), so the
session, which knows no protocol, names them in its audit line and counts them in its
limits, on whichever instance runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

__all__ = ["ANONYMOUS", "SCOPE_KEY", "Identity", "Via", "of_scope"]

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


def of_scope(scope: Mapping[str, Any]) -> Identity:
    """The identity an HTTP front put in this ASGI scope, else `ANONYMOUS`."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, Identity) else ANONYMOUS

