"""`[routes.NAME.back] kind = "acp"`: an agent subprocess spoken to over ACP, and the
MCP servers handed to it."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

import msgspec

from bridge.config import ConfigStruct, PositiveSeconds

__all__ = ["AcpBackConfig", "AcpMcpServer", "EnvFrom"]


class EnvFrom(ConfigStruct):
    """A value taken from the bridge's environment when the agent starts (never logged)."""

    env: str


def _hidden(values: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" if isinstance(v, EnvFrom) else f"{k!r}: <hidden>" for k, v in values.items()) + "}"


class AcpMcpServer(ConfigStruct):
    """An MCP server handed to the agent in `session/new` (ACP schema, `McpServer`)."""

    name: str
    type: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = None
    args: list[str] = []
    env: dict[str, str | EnvFrom] = {}
    url: str | None = None
    headers: dict[str, str | EnvFrom] = {}

    def __post_init__(self) -> None:
        if self.type == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.type != "stdio" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: an {self.type} server needs a url")

    def __repr__(self) -> str:  # env and header values may be secrets (STYLE.md rule 21)
        return f"AcpMcpServer(name={self.name!r}, type={self.type!r}, env={_hidden(self.env)}, headers={_hidden(self.headers)})"


class AcpBackConfig(ConfigStruct, tag="acp", tag_field="kind"):
    """A coding agent that speaks ACP, spawned as a subprocess (bridge/backs/acp/back.py)."""

    command: Annotated[list[str], msgspec.Meta(min_length=1)]
    # Set for the agent: a literal value, or {env = "NAME"} to pass on one of ours.
    env: dict[str, str | EnvFrom] = {}
    # False: the agent sees only PATH, HOME, USER, LANG and the like, plus `env`.
    inherit_env: bool = False
    cwd: str | None = None  # the agent's working directory; default: the session's
    mcp_servers: list[AcpMcpServer] = []
    multiplex: bool = False  # one agent process serves every session of the route
    auth_method: str | None = None  # `authenticate` with this methodId after initialize
    permissions: Literal["ask", "allow_read", "deny"] = "ask"
    # Without an ACP editor offering them: serve fs/* inside `cwd` (read, or read and
    # write), and terminal/* there, keeping at most terminal_output_bytes per terminal.
    fs: Literal["off", "read", "cwd"] = "off"
    terminal: bool = False
    terminal_output_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024
    max_terminals: Annotated[int, msgspec.Meta(ge=1)] = 8
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 * 1024 * 1024
    startup_timeout_s: PositiveSeconds = 60.0  # initialize + session/new (or load)
    request_timeout_s: PositiveSeconds = 30.0  # set_config_option, set_mode, session/close
    kill_grace_s: PositiveSeconds = 3.0  # SIGTERM → SIGKILL for the agent's process group
    # fs/read_text_file and fs/write_text_file served by the bridge: each is bounded by
    # this long (a file that blocks, such as a FIFO, is refused before it is opened).
    fs_timeout_s: PositiveSeconds = 10.0

    def __post_init__(self) -> None:
        if self.cwd is not None and not os.path.isabs(self.cwd):
            raise ValueError(f"cwd must be an absolute path, got {self.cwd!r}")
        if (self.fs != "off" or self.terminal) and self.cwd is None:
            raise ValueError("fs and terminal are served inside cwd: set cwd")

    def __repr__(self) -> str:
        return f"AcpBackConfig(command={self.command!r}, env={_hidden(self.env)}, cwd={self.cwd!r}, multiplex={self.multiplex})"

