"""ACP back: an agent subprocess spoken to over ACP (JSON-RPC on stdio)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.backs.acp.config import AcpBackConfig, EnvFrom
from bridge.registry import BackKind, SecretRefs

if TYPE_CHECKING:
    from bridge.backs.base import Back
    from bridge.config import Route

__all__ = ["BACK"]


def _make(name: str, route: Route) -> Back:
    from bridge.backs.acp.back import AcpBack

    return AcpBack(name, route)


def _secrets(cfg: AcpBackConfig) -> SecretRefs:
    """`{env = "NAME"}` values handed to the agent and its MCP servers, and literal MCP
    header values (of "Bearer xyz", the token part)."""
    envs: list[str] = []
    for values in [cfg.env] + [s.env for s in cfg.mcp_servers] + [s.headers for s in cfg.mcp_servers]:
        envs += [value.env for value in values.values() if isinstance(value, EnvFrom)]
    literal = [v.split(" ", 1)[-1] for s in cfg.mcp_servers for v in s.headers.values() if isinstance(v, str)]
    return SecretRefs(envs=tuple(envs), values=tuple(literal))


BACK = BackKind(kind="acp", config=AcpBackConfig, factory=_make, secrets=_secrets)
