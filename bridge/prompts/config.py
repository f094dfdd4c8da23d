"""The configuration of prompts: `[prompts.NAME]` templates and `[[prompt_sources]]`.

Decoded as part of `bridge.config.Config` (same rules: frozen, unknown keys rejected
with their `$.path`). Shared templates and sources apply to every route; a route adds
its own (`[routes.R.prompts.NAME]`, `[[routes.R.prompt_sources]]`) and may leave the
shared ones out (`shared_prompts = false`). `check_prompts` finds what the types
alone cannot: duplicate source names, unknown placeholders, bad content blocks.

Secrets (header values, environment values) are named, never written here:
`{env = "NAME"}` or `{file = "/path"}`, with an optional `prefix` ("Bearer ").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from bridge.transport.config import OAuthConfig

__all__ = [
    "PromptArgument",
    "PromptMessage",
    "PromptSource",
    "PromptTemplate",
    "SecretRef",
    "check_prompts",
]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PROMPT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class _Conf(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    pass


class SecretRef(_Conf):
    """A value read when it is used: `{env = "NAME"}` or `{file = "/path"}` (a relative
    file is looked up in $CREDENTIALS_DIRECTORY under systemd), after `prefix`."""

    env: str | None = None
    file: str | None = None
    prefix: str = ""

    def __post_init__(self) -> None:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of env and file")

    def read(self) -> str | None:
        """The value (prefix included); None when the variable or file gives none."""
        if self.env is not None:
            value = os.environ.get(self.env)
        else:
            assert self.file is not None
            path = Path(self.file)
            if not path.is_absolute() and os.environ.get("CREDENTIALS_DIRECTORY"):
                path = Path(os.environ["CREDENTIALS_DIRECTORY"]) / path
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError:
                value = None
        return self.prefix + value if value else None


def _hidden(values: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" if isinstance(v, SecretRef) else f"{k!r}: <hidden>" for k, v in values.items()) + "}"


class PromptArgument(_Conf):
    name: str
    description: str | None = None
    title: str | None = None
    required: bool = False
    # What `completion/complete` offers for it (the values starting with what was typed).
    values: list[str] = []


class PromptMessage(_Conf):
    """One message of a template: `text`, or `content` (any MCP content block: image,
    resource, ...). `{argument}` is replaced in `text` and in every string of `content`."""

    role: Literal["user", "assistant"] = "user"
    text: str | None = None
    content: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.content is None):
            raise ValueError("set exactly one of text and content")


class PromptTemplate(_Conf, kw_only=True):
    """`[prompts.NAME]`: a prompt written in the config, served like an MCP prompt."""

    description: str = ""
    title: str | None = None
    arguments: list[PromptArgument] = []
    messages: Annotated[list[PromptMessage], msgspec.Meta(min_length=1)]


class PromptSource(_Conf):
    """An MCP server whose prompts become commands: `command` (stdio) or `url` (Streamable HTTP)."""

    name: str  # shown as `NAME:prompt` when another source already has `prompt`
    command: list[str] | None = None  # argv of a stdio server
    env: dict[str, str | SecretRef] = {}  # on top of a minimal environment (PATH, HOME, ...)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str | SecretRef] = {}
    # Streamable HTTP: an access token from an OAuth 2 server (bridge/transport/oauth.py),
    # sent as `Authorization: Bearer`; a 401 renews it once.
    oauth: OAuthConfig | None = None
    # Start (spawn or connect), initialize and the first listing.
    connect_timeout_s: PositiveSeconds = 30.0
    # One prompts/get or completion/complete.
    request_timeout_s: PositiveSeconds = 30.0
    # After a failure: wait retry_initial_s, doubled each time up to retry_max_s.
    retry_initial_s: PositiveSeconds = 1.0
    retry_max_s: PositiveSeconds = 60.0
    # A ping this often notices a server that went away without closing (HTTP); None: never.
    ping_interval_s: PositiveSeconds | None = 30.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"prompt source {self.name!r}: set exactly one of command (stdio) and url (Streamable HTTP)")
        if self.command is not None and not self.command:
            raise ValueError(f"prompt source {self.name!r}: command is empty")
        if self.url is not None and not re.match(r"^https?://[^/\s]+", self.url):
            raise ValueError(f"prompt source {self.name!r}: {self.url!r} is not an http:// or https:// URL")
        if self.oauth is not None and self.url is None:
            raise ValueError(f"prompt source {self.name!r}: oauth is for a Streamable HTTP source (url)")
        if self.oauth is not None and any(k.lower() == "authorization" for k in self.headers):
            raise ValueError(f"prompt source {self.name!r}: set oauth or an Authorization header, not both")
        if self.cwd is not None and not os.path.isabs(self.cwd):
            raise ValueError(f"prompt source {self.name!r}: cwd must be an absolute path")

    @property
    def kind(self) -> str:
        return "stdio" if self.command is not None else "http"

    def __repr__(self) -> str:  # env and header values may be secrets (STYLE.md rule 21)
        where = f"command={self.command!r}" if self.command is not None else f"url={self.url!r}"
        return f"PromptSource(name={self.name!r}, {where}, env={_hidden(self.env)}, headers={_hidden(self.headers)})"


def _placeholders(template: PromptTemplate) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.update(m.group(1) for m in _PLACEHOLDER.finditer(value) if m.group(1))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for message in template.messages:
        walk(message.text if message.text is not None else message.content)
    return found


def _check_template(where: str, name: str, template: PromptTemplate) -> list[str]:
    from bridge.core.content import ContentBlock

    problems: list[str] = []
    if not _PROMPT_NAME.match(name):
        problems.append(f"{where}: prompt names use letters, digits, '_', '.', '-' (at most 128), not {name!r}")
    declared: set[str] = set()
    for i, arg in enumerate(template.arguments):
        if arg.name in declared:
            problems.append(f"{where}.arguments[{i}].name: duplicate argument {arg.name!r}")
        declared.add(arg.name)
    unknown = sorted(_placeholders(template) - declared)
    if unknown:
        problems.append(f"{where}.messages: placeholders {unknown} name no argument; arguments are {sorted(declared)}")
    for i, message in enumerate(template.messages):
        if message.content is not None:
            try:
                msgspec.convert(message.content, ContentBlock)
            except msgspec.ValidationError as exc:
                problems.append(f"{where}.messages[{i}].content: not a content block: {exc}")
    return problems


def check_prompts(config: Any) -> list[str]:
    """Problems with the prompts of a decoded `Config`, each as `$.path: message`."""
    problems: list[str] = []
    for name, template in config.prompts.items():
        problems += _check_template(f"$.prompts.{name}", name, template)
    seen: dict[str, str] = {}

    def source(where: str, src: PromptSource) -> None:
        if not _SOURCE_NAME.match(src.name):
            problems.append(f"{where}.name: source names use letters, digits, '_', '.', '-' (at most 64)")
        if src.name in seen:
            problems.append(f"{where}.name: {src.name!r} is also the name of {seen[src.name]}; source names are unique")
        else:
            seen[src.name] = where

    for i, src in enumerate(config.prompt_sources):
        source(f"$.prompt_sources[{i}]", src)
    for route_name, route in config.routes.items():
        for name, template in route.prompts.items():
            problems += _check_template(f"$.routes.{route_name}.prompts.{name}", name, template)
        for i, src in enumerate(route.prompt_sources):
            source(f"$.routes.{route_name}.prompt_sources[{i}]", src)
    return problems
