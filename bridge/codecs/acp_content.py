"""Content blocks between ACP and the canonical model, sans-I/O.

ACP carries five content blocks (ACP schema, `ContentBlock`), the canonical model six:
structured data (`DataContent`) has no ACP block, so it travels as an embedded
resource (ACP schema, `EmbeddedResource`) whose URI is an inline `data:` URI (RFC 2397)
and whose media type is a JSON type: `{"uri": "data:application/json", "mimeType":
"application/json" (or the block's own `+json` type), "text": <the JSON>}`. Read back,
exactly that shape is structured data again, so a value crosses ACP (bridge → bridge)
as a value: 42 stays an integer.
"""

from __future__ import annotations

import msgspec

from bridge.codecs import safejson
from bridge.core.content import ContentBlock, DataContent, EmbeddedResource, ResourceContents, WireBlock, data_text

__all__ = ["DATA_URI", "block_in", "wire_block", "wire_blocks"]

DATA_URI = "data:application/json"
_JSON_MIME = "application/json"
# The peer's JSON inside a string: bounded like every frame (depth, 64-bit integers), so
# a nested or huge value is text, never a RecursionError or an unstorable integer.
_json_decoder: safejson.Decoder[object] = safejson.Decoder()


def _is_json_mime(mime: str | None) -> bool:
    """`application/json` or a structured-syntax `+json` type (RFC 6839 §3.1)."""
    return mime is not None and (mime == _JSON_MIME or mime.endswith("+json"))


def wire_block(block: ContentBlock) -> WireBlock:
    """`block` as one of the five blocks ACP carries: a data block becomes an embedded
    JSON resource (ACP schema, `EmbeddedResource`; `uri` a `data:` URI, RFC 2397)."""
    if type(block) is DataContent:
        mime = block.mime_type if _is_json_mime(block.mime_type) else _JSON_MIME
        return EmbeddedResource(resource=ResourceContents(uri=DATA_URI, text=data_text(block), mime_type=mime))
    return block  # type: ignore[return-value]


def wire_blocks(blocks: list[ContentBlock]) -> list[WireBlock]:
    return [wire_block(b) for b in blocks]


def block_in(block: WireBlock) -> ContentBlock:
    """An ACP block in the canonical model: exactly the shape `wire_block` gives a data
    block (a `data:application/json` URI, a JSON media type, JSON text) reads as one again;
    anything else, a text that is not JSON included, stays what it is."""
    if type(block) is EmbeddedResource:
        r = block.resource
        if r.text is not None and r.uri.startswith(DATA_URI) and _is_json_mime(r.mime_type):
            try:
                value = _json_decoder.decode(r.text)
            except msgspec.DecodeError:
                return block
            return DataContent(data=value, mime_type=None if r.mime_type == _JSON_MIME else r.mime_type)
    return block
