"""JSON-RPC 2.0 envelopes (ACP and MCP over stdio, A2A's JSON-RPC binding).

Incoming messages are decoded in two steps (STYLE.md rule 6): this envelope, whose
`params`/`result` stay `msgspec.Raw`, then the params with a per-method decoder.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, UnsetType

__all__ = ["Envelope", "ErrorObject", "ErrorResponse", "Notification", "Request", "Response", "RequestId"]

RequestId = int | str


class ErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class Envelope(msgspec.Struct, omit_defaults=True):
    """Any JSON-RPC message; which members are set says what it is."""

    jsonrpc: str | UnsetType = UNSET
    id: RequestId | None | UnsetType = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: ErrorObject | UnsetType = UNSET


# Not `omit_defaults`: that would drop `"jsonrpc": "2.0"` (a default) from every frame
# we send, and strict peers (the TypeScript ACP SDK) reject such frames. An absent
# `params` stays absent because it is UNSET.
class Request(msgspec.Struct):
    id: RequestId
    method: str
    params: Any | UnsetType = UNSET
    jsonrpc: str = "2.0"


class Notification(msgspec.Struct):
    method: str
    params: Any | UnsetType = UNSET
    jsonrpc: str = "2.0"


class Response(msgspec.Struct):
    id: RequestId
    result: Any
    jsonrpc: str = "2.0"


class ErrorResponse(msgspec.Struct):
    id: RequestId | None
    error: ErrorObject
    jsonrpc: str = "2.0"
