"""Slash commands as text: naming, hints, argument parsing, templates, splicing. No I/O.

- `assign_names(providers)`: the command name of every prompt, clashes resolved in
  configured order (README, "MCP prompts"): the first provider to offer a name keeps
  it, a later one's prompt of the same name is `PROVIDER:NAME`.
- `hint_of(spec)`: the ACP `input.hint` of a prompt (`<required> [optional]`,
  ACP schema, `AvailableCommandInput`: one unstructured hint, not the argument list).
- `parse_invocation(text)` / `parse_arguments(line, spec, usage)`: `/name rest` and
  its arguments, positional in declared order or `key=value`, with shell-like quotes;
  the last positional argument takes any words left over.
- `render_template(template, args)`: a `[prompts.NAME]` template filled in.
- `splice(...)`: a prompt's messages in place of the `/name ...` line (user content
  as is, assistant content as labelled text).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

import msgspec

from bridge.core.content import ContentBlock, TextContent
from bridge.errors import InvalidParams
from bridge.prompts.config import PromptTemplate

__all__ = [
    "COMMAND_NAME",
    "Command",
    "PromptArg",
    "PromptSpec",
    "Provider",
    "Role",
    "assign_names",
    "hint_of",
    "parse_arguments",
    "parse_invocation",
    "render_template",
    "spec_of_template",
    "splice",
]

Role = Literal["user", "assistant"]

# What may follow the `/`: no whitespace, no second `/` (so `/usr/bin/x is broken`
# is plain text). `:` joins a provider to a prompt whose name was already taken.
COMMAND_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
_INVOCATION = re.compile(r"\s*/(" + COMMAND_NAME.pattern + r")(?=\s|$)")
_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=(.*)", re.S)
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_.-]*)\}")
_content = msgspec.json.Decoder(ContentBlock)


class PromptArg(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str | None = None
    title: str | None = None
    required: bool = False


class PromptSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt as its provider lists it (MCP 2025-11-25, Prompts, `Prompt`)."""

    name: str
    description: str | None = None
    title: str | None = None
    arguments: tuple[PromptArg, ...] = ()


class Provider(msgspec.Struct, frozen=True, kw_only=True):
    """Where prompts come from: an MCP source (by its name) or a set of templates."""

    name: str  # the prefix a clashing prompt gets: the source's name, or the route's for its templates
    specs: tuple[PromptSpec, ...]
    source: str | None = None  # the MCP source's name; None for templates
    templates: str | None = None  # "" for the shared `[prompts]`, else the route whose templates these are


class Command(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt under the name every front shows."""

    name: str
    spec: PromptSpec
    provider: Provider


def assign_names(providers: list[Provider]) -> dict[str, Command]:
    """Every prompt's command name, in provider order then listing order.

    The first provider to offer a name keeps it; a later one's prompt of that name is
    `PROVIDER:NAME`. Deterministic for a given set of available providers: a source
    that is down offers nothing until it is back. A prompt whose name cannot follow
    a `/` (whitespace, a `/`) is left out.
    """
    out: dict[str, Command] = {}
    for provider in providers:
        for spec in provider.specs:
            if not COMMAND_NAME.fullmatch(spec.name):
                continue
            name = spec.name if spec.name not in out else f"{provider.name}:{spec.name}"
            if name not in out:
                out[name] = Command(name=name, spec=spec, provider=provider)
    return out


def hint_of(spec: PromptSpec) -> str | None:
    """`<city> [state]`: required arguments in angle brackets, optional in square ones."""
    if not spec.arguments:
        return None
    return " ".join(f"<{a.name}>" if a.required else f"[{a.name}]" for a in spec.arguments)


def parse_invocation(text: str) -> tuple[str, str, str] | None:
    """(name, rest of the first line, the lines after it) of a `/name ...` prompt text."""
    m = _INVOCATION.match(text)
    if m is None:
        return None
    line, _, after = text[m.end() :].partition("\n")
    return m.group(1), line.strip(), after


def parse_arguments(line: str, spec: PromptSpec, usage: str) -> dict[str, str]:
    """The arguments of `/name line`; InvalidParams naming what is wrong and the usage.

    `key=value` sets a declared argument by name; other words fill the remaining
    arguments in declared order, the last of them taking every word left over.
    Quotes ('...' or "...") keep spaces in one word.
    """
    try:
        words = shlex.split(line, posix=True)
    except ValueError as exc:  # an unclosed quote
        raise InvalidParams(f"{usage.split()[0]}: {exc} in {line!r} (usage: {usage})") from exc
    declared = {a.name for a in spec.arguments}
    args: dict[str, str] = {}
    positional: list[str] = []
    for word in words:
        m = _KEYWORD.fullmatch(word)
        if m is not None and m.group(1) in declared:
            if m.group(1) in args:
                raise InvalidParams(f"{usage.split()[0]}: argument {m.group(1)} given twice (usage: {usage})")
            args[m.group(1)] = m.group(2)
        else:
            positional.append(word)
    free = [a.name for a in spec.arguments if a.name not in args]
    if positional and not free:
        what = "takes no arguments" if not spec.arguments else "has no argument left for"
        raise InvalidParams(
            f"{usage.split()[0]} {what} {' '.join(positional)!r}; put more text on the next line (usage: {usage})"
        )
    for i, name in enumerate(free):
        if i >= len(positional):
            break
        args[name] = " ".join(positional[i:]) if i == len(free) - 1 else positional[i]
    missing = [a.name for a in spec.arguments if a.required and a.name not in args]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise InvalidParams(
            f"{usage.split()[0]}: missing required argument{plural} {', '.join(missing)} (usage: {usage})",
            data={"missing": missing, "usage": usage},
        )
    return args


def spec_of_template(name: str, template: PromptTemplate) -> PromptSpec:
    return PromptSpec(
        name=name,
        description=template.description or None,
        title=template.title,
        arguments=tuple(
            PromptArg(name=a.name, description=a.description, title=a.title, required=a.required)
            for a in template.arguments
        ),
    )


def _fill(text: str, args: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return args.get(m.group(1), "")

    return _PLACEHOLDER.sub(one, text)


def _fill_all(value: Any, args: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, args)
    if isinstance(value, dict):
        return {k: _fill_all(v, args) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_all(v, args) for v in value]
    return value


def render_template(template: PromptTemplate, args: dict[str, str]) -> list[tuple[Role, ContentBlock]]:
    """The template's messages with `{argument}` replaced (`{{`/`}}` are literal braces;
    an optional argument not given is empty)."""
    out: list[tuple[Role, ContentBlock]] = []
    for message in template.messages:
        if message.text is not None:
            block: ContentBlock = TextContent(text=_fill(message.text, args))
        else:
            block = _content.decode(msgspec.json.encode(_fill_all(message.content, args)))
        out.append((message.role, block))
    return out


def splice(
    command: str, messages: list[tuple[Role, ContentBlock]], after: str, others: list[ContentBlock]
) -> list[ContentBlock]:
    """The prompt the back receives: the prompt's messages where `/command ...` was,
    then the text after that line, then the prompt's other blocks (attachments).

    User content is passed as is; assistant content (an example answer, a primed
    reply) becomes text labelled as such, so the agent does not take it for the user.
    """
    out: list[ContentBlock] = []
    for role, block in messages:
        if role == "user":
            out.append(block)
        elif isinstance(block, TextContent):
            out.append(TextContent(text=f"[assistant message from /{command}]\n{block.text}"))
        else:
            out.append(TextContent(text=f"[assistant message from /{command}: the next block]"))
            out.append(block)
    if after.strip():
        out.append(TextContent(text=after))
    out.extend(others)
    return out
