"""The one place an outbound `httpx.AsyncClient` is made: the A2A back, the chat back, push notifications.

Every client the bridge opens follows the same rules, so that a route's settings
mean the same thing in every back:

- `trust_env=False`: no proxy or CA bundle from the environment; a route says what it
  trusts (`ca_file`, read by `tls_context`).
- `follow_redirects=False`: a redirect must not carry a route's token to another
  origin (DESIGN.md, complaint 4). Callers that read public documents (an agent
  card) opt in per request.
- Timeouts: `connect_timeout_s` bounds connecting and waiting for a pooled
  connection; reads are unbounded unless `timeout_s` is given, because streams are
  timed by the caller's cancel scopes (STYLE.md rule 15).
- Limits: at most `max_connections`, all of them kept alive, when given; else at most
  `DEFAULT_MAX_CONNECTIONS`, `DEFAULT_MAX_KEEPALIVE` of them kept alive (a bare
  `httpx.Limits()` is unbounded, and a back or the A2A push sender, whose webhooks the
  clients choose, must not open connections without end: STYLE.md rule 14).
- A `User-Agent: agent-bridge/<version>` header, plus the caller's own.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping

import httpx

from bridge import __version__

__all__ = ["DEFAULT_MAX_CONNECTIONS", "DEFAULT_MAX_KEEPALIVE", "USER_AGENT", "open_client", "tls_context"]

USER_AGENT = f"agent-bridge/{__version__}"
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_MAX_KEEPALIVE = 20

# httpx logs every request at INFO; on a streaming turn that drowns the bridge's own lines.
logging.getLogger("httpx").setLevel(logging.WARNING)


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A client TLS context trusting the PEM bundle `ca_file` (raises OSError when unreadable)."""
    return ssl.create_default_context(cafile=ca_file)


def open_client(
    *,
    connect_timeout_s: float,
    timeout_s: float | None = None,
    verify: ssl.SSLContext | bool = True,
    max_connections: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """A pooled client with the settings of the module docstring; the caller closes it."""
    limits = (
        httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        if max_connections is not None
        else httpx.Limits(max_connections=DEFAULT_MAX_CONNECTIONS, max_keepalive_connections=DEFAULT_MAX_KEEPALIVE)
    )
    return httpx.AsyncClient(
        trust_env=False,
        verify=verify,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=connect_timeout_s),
        limits=limits,
        headers={"User-Agent": USER_AGENT, **(headers or {})},
    )
