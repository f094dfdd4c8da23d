"""Content blocks: the ACP / MCP ContentBlock shapes, shared by every protocol.

ACP v1 and MCP 2025-11-25 use the same five block types (ACP schema, `ContentBlock`;
MCP 2025-11-25, `schema.ts` `ContentBlock`), so the canonical model keeps their wire
field names; the ACP codec passes them through untouched and the A2A / chat codecs
convert to and from them.

A sixth block, `DataContent`, is structured data (an A2A `data` part, a2a.proto
`Part.data`; MCP `structuredContent`; a chat headless result): a JSON value kept as a
value, so an integer stays an integer and an object stays an object across a hop. It
has no ACP/MCP block of its own: each front says how it carries it (`WireBlock` is the
five blocks those protocols can decode).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "Annotations",
    "AudioContent",
    "ContentBlock",
    "DataContent",
    "EmbeddedResource",
    "ImageContent",
    "ResourceContents",
    "ResourceLink",
    "TextContent",
    "WireBlock",
    "data_text",
    "text_of",
    "title_of",
]


class _Block(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", tag_field="type", gc=False):
    annotations: Annotations | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class Annotations(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    audience: list[Literal["user", "assistant"]] | None = None
    priority: float | None = None
    last_modified: str | None = None


class TextContent(_Block, tag="text"):
    text: str


class ImageContent(_Block, tag="image"):
    data: str
    mime_type: str
    uri: str | None = None


class AudioContent(_Block, tag="audio"):
    data: str
    mime_type: str


class ResourceLink(_Block, tag="resource_link"):
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None


class ResourceContents(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Embedded resource contents: exactly one of `text` or `blob` (base64) is set.

    ACP/MCP define two untagged shapes; one Struct with both optional decodes either.
    """

    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str | None = None


class EmbeddedResource(_Block, tag="resource"):
    resource: ResourceContents


class DataContent(_Block, tag="data"):
    """A JSON value (object, array, number, string, bool or null), with the media type
    its producer gave it (A2A parts may say, e.g. `application/vnd.example+json`)."""

    data: Any
    mime_type: str | None = None


WireBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
ContentBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource | DataContent

_json = msgspec.json.Encoder(order="deterministic")


def data_text(block: DataContent) -> str:
    """The JSON text of a data block (keys sorted, so the same value reads the same)."""
    return _json.encode(block.data).decode()


def text_of(blocks: list[ContentBlock]) -> str:
    """The plain text of a prompt or message: text blocks and embedded text resources."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, TextContent):
            out.append(b.text)
        elif isinstance(b, EmbeddedResource) and b.resource.text is not None:
            out.append(b.resource.text)
        elif isinstance(b, ResourceLink):
            out.append(b.uri)
        elif isinstance(b, DataContent):
            out.append(data_text(b))
    return "".join(out)


def title_of(blocks: list[ContentBlock], limit: int = 80) -> str | None:
    """A one-line title for a session from its first prompt: each block's text, blocks
    apart by a space (so "hello" + "second message" does not read "hellosecond
    message"), whitespace collapsed."""
    words = " ".join(text_of([b]) for b in blocks).split()
    return " ".join(words)[:limit] or None
