"""Reading an A2A agent card, sans-I/O: which interface to call, how to authenticate, what to show.

`parse_card(body, card_url)` accepts a 1.0 card (`supportedInterfaces`), a 0.3 card
(`url`, `preferredTransport`, `additionalInterfaces`, `protocolVersion`), and the
merged card a2a-sdk serves (both at once), the way a2a-sdk's own client reads them
(A2A spec §8). `choose_interface` picks the interface for a dialect and
binding ("auto" prefers 1.0, then the card's order); `auth_placement` says where a
token goes according to the card's security schemes; `commands` turns skills into
slash commands (A2A spec §8, `AgentSkill`).

`publish_card` writes one for the A2A front (the merged 1.0 + 0.3 card for clients
that did not ask for 1.0), `skills_for` makes a route's commands into skills.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import urljoin

import msgspec

from bridge.codecs import safejson
from bridge.codecs.a2a_dialect import Binding, Dialect, Interface
from bridge.core.events import CommandInfo
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "AuthPlacement",
    "CardError",
    "CardInterface",
    "CardSpec",
    "CardView",
    "auth_placement",
    "choose_interface",
    "commands",
    "parse_card",
    "publish_card",
    "skills_for",
]

_card10 = safejson.Decoder(s.AgentCard)
_card03 = safejson.Decoder(v.AgentCardV03)


class CardError(Exception):
    """The card cannot be read or used; the message says why, in a user's words."""


class CardInterface(NamedTuple):
    url: str
    binding: str  # as the card spells it: "JSONRPC", "HTTP+JSON", "GRPC", a URI
    version: str  # "1.0", "0.3", or "" when the card gives none


class AuthPlacement(NamedTuple):
    header: str  # e.g. "Authorization" or "X-API-Key"
    prefix: str  # "Bearer " for HTTP bearer auth, "" for an API key


class CardView(NamedTuple):
    name: str
    description: str
    version: str
    streaming: bool
    interfaces: list[CardInterface]
    # scheme name → (kind, detail): ("bearer", ""), ("basic", ""), ("api_key", "header:X-Key"),
    # ("oauth2"|"openid"|"mtls", "")
    schemes: dict[str, tuple[str, str]]
    required: list[str]  # scheme names named by the card's security requirements, in order
    skills: list[s.AgentSkill]


def parse_card(body: bytes, card_url: str) -> CardView:
    try:
        c10 = _card10.decode(body)
        c03 = _card03.decode(body)
    except msgspec.ValidationError as exc:
        raise CardError(f"it does not match the A2A agent card schema: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise CardError(f"it is not valid JSON: {exc}") from exc
    try:  # urljoin raises ValueError on a URL it cannot split ("http://[::1")
        interfaces = _interfaces(c10, c03, card_url)
    except ValueError as exc:
        raise CardError(f"it names an interface URL that is not valid: {exc}") from exc
    schemes: dict[str, tuple[str, str]] = {}
    for name, sch in (c10.security_schemes or {}).items():
        if sch.http_auth_security_scheme is not None:
            schemes[name] = (sch.http_auth_security_scheme.scheme.lower() or "bearer", "")
        elif sch.api_key_security_scheme is not None:
            k = sch.api_key_security_scheme
            schemes[name] = ("api_key", f"{k.location or 'header'}:{k.name}")
        elif sch.oauth2_security_scheme is not None:
            schemes[name] = ("oauth2", "")
        elif sch.open_id_connect_security_scheme is not None:
            schemes[name] = ("openid", "")
        elif sch.mtls_security_scheme is not None:
            schemes[name] = ("mtls", "")
    for name, old in (c03.security_schemes or {}).items():
        if name in schemes or not old.type:
            continue
        kind = {"http": (old.scheme or "bearer").lower(), "apiKey": "api_key", "oauth2": "oauth2", "openIdConnect": "openid", "mutualTLS": "mtls"}.get(old.type)
        if kind:
            schemes[name] = (kind, f"{old.location or 'header'}:{old.name or ''}" if kind == "api_key" else "")
    required: list[str] = []
    for req in c10.security_requirements or ():
        required += [n for n in req.schemes if n not in required]
    for req03 in c03.security or ():
        required += [n for n in req03 if n not in required]
    skills = c10.skills or [
        s.AgentSkill(id=k.id, name=k.name, description=k.description, tags=k.tags, examples=k.examples) for k in c03.skills
    ]
    streaming = bool(c10.capabilities.streaming or c03.capabilities.streaming)
    return CardView(
        name=c10.name or c03.name,
        description=c10.description or c03.description,
        version=c10.version or c03.version,
        streaming=streaming,
        interfaces=interfaces,
        schemes=schemes,
        required=required,
        skills=skills,
    )


def _interfaces(c10: s.AgentCard, c03: v.AgentCardV03, card_url: str) -> list[CardInterface]:
    if c10.supported_interfaces:
        return [
            CardInterface(urljoin(card_url, i.url), i.protocol_binding, _major_minor(i.protocol_version))
            for i in c10.supported_interfaces
            if i.url
        ]
    if c03.url:
        version = _major_minor(c03.protocol_version or "0.3.0")
        interfaces = [CardInterface(urljoin(card_url, c03.url), c03.preferred_transport or "JSONRPC", version)]
        interfaces += [
            CardInterface(urljoin(card_url, i.url), i.transport, version) for i in c03.additional_interfaces or () if i.url
        ]
        return interfaces
    raise CardError("it names no interface (neither supportedInterfaces nor url)")


def _major_minor(version: str) -> str:
    m = re.match(r"^\s*([0-9]{1,9})\.([0-9]{1,9})", version or "")  # a peer's text: int() stays small
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else ""


_BINDINGS = {"JSONRPC": Binding.JSONRPC, "HTTP+JSON": Binding.HTTP_JSON}
_CONFIG_BINDINGS = {"jsonrpc": Binding.JSONRPC, "http+json": Binding.HTTP_JSON}


def choose_interface(view: CardView, dialect: str, binding: str) -> Interface:
    """The interface to call. `dialect` is "auto"|"1.0"|"0.3", `binding` "auto"|"jsonrpc"|"http+json".

    An interface without a version is read as 0.3 (a2a-sdk does the same). Raises
    CardError naming what the card offers when nothing fits.
    """
    want_binding = _CONFIG_BINDINGS.get(binding)
    usable: dict[Dialect, list[Interface]] = {Dialect.V1_0: [], Dialect.V0_3: []}
    for i in view.interfaces:
        b = _BINDINGS.get(i.binding.upper())
        version = i.version or "0.3"
        d = Dialect.V1_0 if version == "1.0" else Dialect.V0_3 if version == "0.3" else None
        if b is None or d is None or (want_binding is not None and b is not want_binding):
            continue
        usable[d].append(Interface(i.url, d, b))
    order = [Dialect.V1_0, Dialect.V0_3] if dialect == "auto" else [Dialect(dialect)]
    for d in order:
        if usable[d]:
            return usable[d][0]
    offered = ", ".join(f"{i.binding} {i.version or '(no version)'} at {i.url}" for i in view.interfaces) or "nothing"
    wanted = " ".join(
        w for w in ("A2A " + (dialect if dialect != "auto" else "1.0 or 0.3"), f"over {binding}" if binding != "auto" else "") if w
    )
    raise CardError(f"it offers no interface agent-bridge can use ({wanted}); it offers: {offered}")


def auth_placement(view: CardView, *, header_override: str | None = None) -> AuthPlacement:
    """Where a configured token goes: the card's first header-borne scheme, else a bearer token."""
    if header_override:
        return AuthPlacement(header_override, "")
    names = view.required + [n for n in view.schemes if n not in view.required]
    for name in names:
        kind, detail = view.schemes.get(name, ("", ""))
        if kind == "api_key":
            where, _, header = detail.partition(":")
            if where != "header" or not header:
                # A key in the URL would end up in access logs and error messages.
                raise CardError(
                    f"its security scheme {name!r} wants the API key in the {where}; agent-bridge only sends "
                    "secrets in headers (set auth_header if the agent also accepts one)"
                )
            return AuthPlacement(header, "")
        if kind == "basic":
            return AuthPlacement("Authorization", "Basic ")
        if kind in ("bearer", "oauth2", "openid"):
            return AuthPlacement("Authorization", "Bearer ")
    return AuthPlacement("Authorization", "Bearer ")


_COMMAND = re.compile(r"[^A-Za-z0-9_.-]+")


def commands(view: CardView) -> list[CommandInfo]:
    """Skills as slash commands: `/skill rest` reaches the agent as that text (A2A spec §8, `AgentSkill`)."""
    out: list[CommandInfo] = []
    seen: set[str] = set()
    for k in view.skills:
        name = _COMMAND.sub("-", k.id or k.name).strip("-") or "skill"
        if name in seen:
            continue
        seen.add(name)
        hint = f"e.g. {k.examples[0]}" if k.examples else None
        out.append(CommandInfo(name=name, description=k.description or k.name, hint=hint))
    return out


# == writing a card (the A2A front) ====================================================


class CardSpec(NamedTuple):
    """What the A2A front knows of a route, to write its agent card from."""

    name: str
    description: str
    version: str
    url: str  # the route's interface URL (JSON-RPC POST here, HTTP+JSON paths under it)
    streaming: bool
    push_notifications: bool
    extended_card: bool
    auth: tuple[str, str] | None  # ("bearer", "") or ("api_key", header name)
    skills: list[s.AgentSkill]
    provider: s.AgentProvider | None = None
    documentation_url: str | None = None
    icon_url: str | None = None
    # OpenID Connect issuers whose bearer tokens the agent accepts (`[[auth.issuers]]`):
    # each an `openIdConnect` scheme (A2A 1.0 §4.5, OpenIdConnectSecurityScheme) naming its
    # discovery document, and each its own alternative in the requirements.
    issuers: tuple[str, ...] = ()


_MODES_IN = ["text/plain", "application/json", "image/png", "image/jpeg", "application/octet-stream"]
_MODES_OUT = ["text/plain", "application/json"]


def publish_card(spec: CardSpec, *, legacy: bool) -> dict[str, object]:
    """The route's agent card as JSON-able data (A2A spec §8).

    `supportedInterfaces` lists JSON-RPC and HTTP+JSON in 1.0, then both in 0.3 (a
    1.0 client prefers 1.0; one that must speak 0.3 finds it). With `legacy` the
    document also carries the 0.3 card's fields (`url`, `preferredTransport`,
    `additionalInterfaces`, `protocolVersion`, `security`, OpenAPI-style schemes):
    the merged card a2a-sdk's own server writes, which a 0.3 client reads and a 1.0
    client still parses as a 1.0 card (it ignores the fields it does not know).
    """
    interfaces = [
        s.AgentInterface(url=spec.url, protocol_binding=b, protocol_version=ver)
        for ver in ("1.0", "0.3")
        for b in ("JSONRPC", "HTTP+JSON")
    ]
    schemes: dict[str, s.SecurityScheme] | None = None
    requirements: list[s.SecurityRequirement] | None = None
    if spec.auth is not None:
        kind, header = spec.auth
        if kind == "api_key":
            name = "apiKey"
            scheme = s.SecurityScheme(api_key_security_scheme=s.APIKeySecurityScheme(location="header", name=header))
        else:
            name = "bearer"
            scheme = s.SecurityScheme(http_auth_security_scheme=s.HTTPAuthSecurityScheme(scheme="Bearer"))
        schemes = {name: scheme}
        requirements = [s.SecurityRequirement(schemes={name: s.StringList()})]
    oidc = _oidc_names(spec.issuers)
    if oidc:
        schemes = {**(schemes or {}), **{
            n: s.SecurityScheme(open_id_connect_security_scheme=s.OpenIdConnectSecurityScheme(open_id_connect_url=url))
            for n, url in oidc.items()
        }}  # fmt: skip
        requirements = [*(requirements or []), *(s.SecurityRequirement(schemes={n: s.StringList()}) for n in oidc)]
    card = s.AgentCard(
        name=spec.name,
        description=spec.description,
        supported_interfaces=interfaces,
        version=spec.version,
        provider=spec.provider,
        documentation_url=spec.documentation_url,
        icon_url=spec.icon_url,
        capabilities=s.AgentCapabilities(
            streaming=spec.streaming, push_notifications=spec.push_notifications, extended_agent_card=spec.extended_card or None
        ),
        security_schemes=schemes,
        security_requirements=requirements,
        default_input_modes=_MODES_IN,
        default_output_modes=_MODES_OUT,
        skills=spec.skills,
    )
    doc: dict[str, object] = msgspec.to_builtins(card)
    if not legacy:
        return doc
    old = v.AgentCardV03(
        name=spec.name,
        description=spec.description,
        url=spec.url,
        preferred_transport="JSONRPC",
        additional_interfaces=[v.AgentInterfaceV03(url=spec.url, transport=t) for t in ("JSONRPC", "HTTP+JSON")],
        protocol_version="0.3.0",
        version=spec.version,
        capabilities=v.AgentCapabilitiesV03(streaming=spec.streaming, push_notifications=spec.push_notifications),
        security_schemes=(
            {n: v.SecuritySchemeV03(type="openIdConnect", open_id_connect_url=oidc[n]) if n in oidc
             else v.SecuritySchemeV03(type="apiKey", location="header", name=spec.auth[1]) if spec.auth and spec.auth[0] == "api_key"
             else v.SecuritySchemeV03(type="http", scheme="bearer") for n in (schemes or {})}
            if schemes else None
        ),  # fmt: skip
        security=[{n: []} for n in (schemes or {})] or None,
        default_input_modes=_MODES_IN,
        default_output_modes=_MODES_OUT,
        skills=[
            v.AgentSkillV03(id=k.id, name=k.name, description=k.description, tags=k.tags, examples=k.examples) for k in spec.skills
        ],
        supports_authenticated_extended_card=spec.extended_card or None,
    )
    return _merge(doc, msgspec.to_builtins(old))


def _oidc_names(issuers: tuple[str, ...]) -> dict[str, str]:
    """Scheme name -> the issuer's discovery URL (OpenID Connect Discovery 1.0 §4)."""
    urls = [i.rstrip("/") + "/.well-known/openid-configuration" for i in issuers]
    return {("oidc" if len(urls) == 1 else f"oidc{n + 1}"): url for n, url in enumerate(urls)}


def _merge(new: dict[str, object], old: dict[str, object]) -> dict[str, object]:
    """Add `old`'s keys that `new` lacks, recursively (a2a-sdk `agent_card_to_dict`)."""
    for k, val in old.items():
        mine = new.get(k)
        if k not in new:
            new[k] = val
        elif isinstance(val, dict) and isinstance(mine, dict):
            _merge(mine, val)
        elif isinstance(val, list) and isinstance(mine, list):
            for a, b in zip(mine, val):
                if isinstance(a, dict) and isinstance(b, dict):
                    _merge(a, b)
    return new


def skills_for(commands: list[CommandInfo], *, route: str, title: str, description: str) -> list[s.AgentSkill]:
    """Slash commands and prompts as skills (A2A spec §8, `AgentSkill`: a skill is chosen from the text, so
    each example is `/name ...`); a route with none gets one skill for itself."""
    skills = [
        s.AgentSkill(
            id=c.name,
            name=f"/{c.name}",
            description=c.description or f"the /{c.name} command",
            tags=["command"],
            examples=[f"/{c.name} {c.hint}" if c.hint else f"/{c.name}"],
        )
        for c in commands
    ]
    return skills or [s.AgentSkill(id=route, name=title, description=description, tags=["chat"])]
