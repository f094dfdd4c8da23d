"""MCP front: prompts and routes as an MCP server (stdio and Streamable HTTP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.fronts.mcp.config import McpFrontConfig
from bridge.registry import FrontKind, SecretRefs

if TYPE_CHECKING:
    from bridge.config import Config
    from bridge.fronts.http import HttpApp
    from bridge.session import SessionManager

__all__ = ["FRONT"]


def _register(app: HttpApp, config: Config, manager: SessionManager) -> None:
    # MCP 2025-11-25, Transports (Streamable HTTP); the SDK loads in the background.
    if config.section(McpFrontConfig).enabled:
        from bridge.fronts.mcp import streamable_http

        streamable_http.register(app, config, manager)


def _secrets(cfg: McpFrontConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else (), files=(cfg.token_file,) if cfg.token_file else ())


FRONT = FrontKind(name="mcp", config=McpFrontConfig, register=_register, secrets=_secrets, reloadable=False)
