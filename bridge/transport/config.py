"""`[routes.NAME.oauth]` and a prompt source's `oauth`: how the bridge gets an access token
for a back or an MCP server from an OAuth 2 authorization server.

Two grants: client credentials (RFC 6749 §4.4), the bridge authenticating as itself,
and token exchange (RFC 8693 §2.1), trading a subject token (read from the environment
or a file) for one meant for the agent. Secrets are named, never written here: the
client secret and the subject token come from `*_env` (an environment variable) or
`*_file` (a file; a relative path is looked up in $CREDENTIALS_DIRECTORY, where
systemd's `LoadCredential=` puts it), read when a token is fetched. What the token
endpoint answers is bounded (`max_response_bytes`, `timeout_s`, `retries`).

Part of the `config` layer: imported by `bridge.config` (the route) and
`bridge.prompts.config` (a prompt source), so it imports neither.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

import msgspec

__all__ = ["ACCESS_TOKEN_TYPE", "OAuthConfig"]

# RFC 8693 §3, token type identifiers.
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the bridge sets itself, or that frame the request (RFC 9110 §7.6.1, §8.6; RFC
# 9112 §6): a caller's subject in one would replace the token or the message's framing.
_NOT_FORWARDED = frozenset({
    "authorization", "proxy-authorization", "cookie", "host", "content-length", "content-type", "content-encoding",
    "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade", "expect", "accept", "a2a-version",
    "a2a-extensions",
})  # fmt: skip


class OAuthConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """An OAuth 2 client (bridge/transport/oauth.py, `OAuthClient`)."""

    token_url: str  # the authorization server's token endpoint (RFC 6749 §3.2)
    grant: Literal["client_credentials", "token_exchange"] = "client_credentials"
    client_id: str | None = None
    client_secret_env: str | None = None
    client_secret_file: str | None = None
    # How the client authenticates at the token endpoint (RFC 6749 §2.3.1): HTTP Basic
    # (which servers MUST support) or the credentials in the form body.
    client_auth: Literal["basic", "post"] = "basic"
    scope: str | None = None  # RFC 6749 §3.3, space-separated
    audience: str | None = None  # RFC 8693 §2.1; many servers take it for client credentials too
    resource: str | None = None  # RFC 8707 §2, an absolute URI
    # token_exchange: the token to trade (RFC 8693 §2.1 subject_token) and its type.
    subject_token_env: str | None = None
    subject_token_file: str | None = None
    subject_token_type: str = ACCESS_TOKEN_TYPE
    requested_token_type: str | None = None
    # A token is used until `expires_in` minus this margin (at most half its life), then
    # renewed: with its refresh_token if the server gave one (RFC 6749 §6), else a new grant.
    expiry_margin_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 30.0
    # A token whose answer says nothing of its life is used this long.
    default_lifetime_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 300.0
    # One token request, connect to last byte; failures worth retrying (the server
    # unreachable, 5xx, 429) are retried this many times, backing off from retry_backoff_s.
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=300)] = 10.0
    retries: Annotated[int, msgspec.Meta(ge=0, le=5)] = 2
    retry_backoff_s: Annotated[float, msgspec.Meta(gt=0, le=30)] = 0.5
    max_response_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1024 * 1024)] = 64 * 1024
    ca_file: str | None = None  # PEM bundle to trust for the token endpoint
    # Send the turn's caller (its identity's subject) to the agent in this header, e.g.
    # "X-Forwarded-User". Only the A2A back, whose every call belongs to one turn, can.
    forward_identity_header: str | None = None

    def __post_init__(self) -> None:
        _check_token_url(self.token_url)
        if self.client_secret_env and self.client_secret_file:
            raise ValueError("set client_secret_env or client_secret_file, not both")
        if self.subject_token_env and self.subject_token_file:
            raise ValueError("set subject_token_env or subject_token_file, not both")
        secret = bool(self.client_secret_env or self.client_secret_file)
        if self.grant == "client_credentials" and not (self.client_id and secret):
            raise ValueError("grant client_credentials needs client_id and client_secret_env or client_secret_file")
        if self.grant == "token_exchange" and not (self.subject_token_env or self.subject_token_file):
            raise ValueError("grant token_exchange needs subject_token_env or subject_token_file")
        if secret and not self.client_id:
            raise ValueError("a client secret needs its client_id")
        if self.resource is not None and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", self.resource):
            raise ValueError(f"resource: {self.resource!r} is not an absolute URI (RFC 8707 §2)")
        if self.forward_identity_header is not None and not _HEADER_NAME.fullmatch(self.forward_identity_header):
            raise ValueError(f"forward_identity_header: {self.forward_identity_header!r} is not a header name")
        if self.forward_identity_header is not None and self.forward_identity_header.lower() in _NOT_FORWARDED:
            raise ValueError(f"forward_identity_header: {self.forward_identity_header!r} is a header the bridge sets or "
                             "that frames the request; name one of its own (X-Forwarded-User)")  # fmt: skip

    @property
    def envs(self) -> tuple[str, ...]:
        """The environment variables holding its secrets (for log redaction)."""
        return tuple(e for e in (self.client_secret_env, self.subject_token_env) if e)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.client_secret_file, self.subject_token_file) if f)


def _check_token_url(url: str) -> None:
    """An http(s) URL whose host and port parse (the client names it, without its query,
    in every error), with no control character and no credentials in it: the client's
    secret is named by `client_secret_env`/`client_secret_file`, never written here."""
    if not re.match(r"^https?://[^/\s]+", url) or not url.isprintable():
        raise ValueError(f"token_url: {url!r} is not an http:// or https:// URL")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise ValueError(f"token_url: {url!r} is not a usable URL ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"token_url: {url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("token_url: holds credentials (user:password@); set client_id and client_secret_env or client_secret_file")
