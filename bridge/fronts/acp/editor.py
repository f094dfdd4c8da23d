"""The editor's `fs/*` and `terminal/*` methods, offered to a session's back.

An ACP back whose agent asks for a file or a terminal forwards the request here
(`ClientServices`, bridge/backs/base.py); it goes to the editor unchanged (the back
puts the bridge's sessionId in it) through the connection's JSON-RPC peer, and the
editor's error comes back mapped by meaning (STYLE.md rule 9). Which methods exist
is what the editor declared in `initialize` (ACP schema, `ClientCapabilities`).
"""

from __future__ import annotations

from typing import Any

from bridge.codecs.jsonrpc_peer import RequestError
from bridge.errors import (
    AuthRequired,
    BackError,
    BackUnavailable,
    BridgeError,
    InvalidParams,
    MethodNotFound,
    NotFound,
    RequestCancelled,
)
from bridge.schema import acp
from bridge.transport.ndjson import NdjsonConnection

__all__ = ["EditorServices"]

# The editor's JSON-RPC errors by meaning (ACP schema, `ErrorCode`).
_EDITOR_ERRORS: dict[int, type[BridgeError]] = {
    -32602: InvalidParams,
    -32601: MethodNotFound,
    -32002: NotFound,
    -32000: AuthRequired,
    -32800: RequestCancelled,
}


class EditorServices:
    """One editor connection's files and terminals; `caps` is set at `initialize`."""

    __slots__ = ("conn", "caps", "timeout_s")

    def __init__(self, conn: NdjsonConnection, timeout_s: float) -> None:
        self.conn = conn
        self.caps = acp.ClientCapabilities()
        self.timeout_s = timeout_s

    @property
    def fs_read(self) -> bool:
        fs = self.caps.fs
        return fs is not None and fs.read_text_file

    @property
    def fs_write(self) -> bool:
        fs = self.caps.fs
        return fs is not None and fs.write_text_file

    @property
    def terminal(self) -> bool:
        return self.caps.terminal

    async def call(self, method: str, params: Any) -> Any:
        """The editor's result (raw JSON), or its error mapped; BackUnavailable when it
        does not answer within the front's `request_timeout_s` or goes away."""
        outcome = await self.conn.request(method, params, timeout_s=self.timeout_s)
        if outcome is None:
            raise BackUnavailable(f"the editor did not answer {method}")
        if type(outcome) is RequestError:
            error = outcome.error
            cls = _EDITOR_ERRORS.get(error.code, BackError)
            raise cls(f"the editor answered {method}: {error.message}", data=error.data)
        return outcome.result  # type: ignore[union-attr]
