"""`[mcp]`: the MCP front's settings (`/mcp` on the daemon's listener and `agent-bridge mcp`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds

__all__ = ["McpFrontConfig"]


class McpFrontConfig(ConfigStruct):
    """`[mcp]`: the MCP front, `/mcp` on the daemon's listener and `agent-bridge mcp`.

    Token: `token_env`/`token_file` here, else the listener's (`[ws]`); requests then
    need `Authorization: Bearer`. Origin: a request from a browser page must come from
    a loopback origin or one listed here ("*": any).
    """

    enabled: bool = True
    token_env: str | None = None
    token_file: str | None = None
    allowed_origins: list[str] = []
    # Every route as a tool (`tools/call` runs one turn and returns its final text).
    tools: bool = True
    # Progress notifications during a tool call, at most this often.
    progress_interval_s: PositiveSeconds = 0.25
    # Streamable HTTP sessions: closed after this long without a request; at most this many.
    session_idle_timeout_s: PositiveSeconds = 1800.0
    max_sessions: Annotated[int, msgspec.Meta(ge=1)] = 1000
    # A session's newest events kept for a client whose stream was cut to resume from
    # (`Last-Event-ID`, bridge/fronts/mcp/resume.py); 0: streams are not resumable.
    resume_events: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 1000
    # ... and at most this many bytes of them (as JSON) a session; all sessions together
    # keep at most 64 times this.
    resume_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 1 << 20

    @property
    def token_required(self) -> bool:
        return self.token_env is not None or self.token_file is not None

    def token(self) -> str | None:
        """`token_env`'s value if set, else `token_file`'s content; None if neither yields one."""
        if self.token_env is not None and os.environ.get(self.token_env):
            return os.environ[self.token_env]
        if self.token_file is not None:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        return None
