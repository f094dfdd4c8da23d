"""The A2A 1.0 agent card (ProtoJSON of `AgentCard` in `specification/a2a.proto`; A2A spec §8).

Read by the client side (`bridge.codecs.a2a_card.parse_card`) and written by the
server side (`publish_card`); `bridge.schema.a2a` re-exports every name, and
`bridge.schema.a2a_v03` builds the 0.3 card from some of them. Wire structs
tolerate unknown fields (STYLE.md rule 8).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "APIKeySecurityScheme",
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentExtension",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "HTTPAuthSecurityScheme",
    "MutualTlsSecurityScheme",
    "OAuth2SecurityScheme",
    "OAuthFlow",
    "OAuthFlows",
    "OpenIdConnectSecurityScheme",
    "SecurityRequirement",
    "SecurityScheme",
    "StringList",
]


class _Card(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Base of the card's structs: the settings of `bridge.schema.a2a`'s wire structs."""


class AgentInterface(_Card):
    url: str = ""
    protocol_binding: str = ""  # "JSONRPC" | "GRPC" | "HTTP+JSON" | a URI
    protocol_version: str = ""
    tenant: str | None = None


class AgentProvider(_Card):
    organization: str = ""
    url: str = ""


class AgentExtension(_Card):
    uri: str = ""
    description: str | None = None
    required: bool = False
    params: dict[str, Any] | None = None


class AgentCapabilities(_Card):
    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: list[AgentExtension] | None = None
    extended_agent_card: bool | None = None


class StringList(_Card):
    items: list[str] = msgspec.field(default_factory=list, name="list")


class SecurityRequirement(_Card):
    schemes: dict[str, StringList] = {}


class AgentSkill(_Card):
    id: str = ""
    name: str = ""
    description: str = ""
    tags: list[str] = []
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None
    security_requirements: list[SecurityRequirement] | None = None


class APIKeySecurityScheme(_Card):
    location: str = "header"  # "header" | "query" | "cookie"
    name: str = ""
    description: str | None = None


class HTTPAuthSecurityScheme(_Card):
    scheme: str = ""  # "Bearer", "Basic", ... (RFC 7235, case-insensitive)
    bearer_format: str | None = None
    description: str | None = None


class OAuthFlow(_Card):
    """Any OAuth flow; which fields are set depends on the flow."""

    authorization_url: str | None = None
    device_authorization_url: str | None = None
    token_url: str | None = None
    refresh_url: str | None = None
    scopes: dict[str, str] = {}
    pkce_required: bool | None = None


class OAuthFlows(_Card):
    authorization_code: OAuthFlow | None = None
    client_credentials: OAuthFlow | None = None
    device_code: OAuthFlow | None = None
    implicit: OAuthFlow | None = None  # deprecated in 1.0
    password: OAuthFlow | None = None  # deprecated in 1.0


class OAuth2SecurityScheme(_Card):
    flows: OAuthFlows = msgspec.field(default_factory=OAuthFlows)
    oauth2_metadata_url: str | None = None
    description: str | None = None


class OpenIdConnectSecurityScheme(_Card):
    open_id_connect_url: str = ""
    description: str | None = None


class MutualTlsSecurityScheme(_Card):
    description: str | None = None


class SecurityScheme(_Card):
    """Exactly one member is set."""

    api_key_security_scheme: APIKeySecurityScheme | None = None
    http_auth_security_scheme: HTTPAuthSecurityScheme | None = None
    oauth2_security_scheme: OAuth2SecurityScheme | None = None
    open_id_connect_security_scheme: OpenIdConnectSecurityScheme | None = None
    mtls_security_scheme: MutualTlsSecurityScheme | None = None


class AgentCardSignature(_Card):
    protected: str = ""
    signature: str = ""
    header: dict[str, Any] | None = None


class AgentCard(_Card):
    name: str = ""
    description: str = ""
    supported_interfaces: list[AgentInterface] = []
    version: str = ""
    provider: AgentProvider | None = None
    documentation_url: str | None = None
    icon_url: str | None = None
    capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    security_schemes: dict[str, SecurityScheme] | None = None
    security_requirements: list[SecurityRequirement] | None = None
    default_input_modes: list[str] = []
    default_output_modes: list[str] = []
    skills: list[AgentSkill] = []
    signatures: list[AgentCardSignature] | None = None
