"""A2A back: a remote A2A agent (1.0 or 0.3, JSON-RPC or HTTP+JSON, SSE)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.backs.a2a.config import A2ABackConfig
from bridge.registry import BackKind, SecretRefs

if TYPE_CHECKING:
    from bridge.backs.base import Back
    from bridge.config import Route

__all__ = ["BACK"]


def _make(name: str, route: Route) -> Back:
    from bridge.backs.a2a.back import A2ABack

    return A2ABack(name, route)


def _secrets(cfg: A2ABackConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else (), files=(cfg.token_file,) if cfg.token_file else ())


BACK = BackKind(kind="a2a", config=A2ABackConfig, factory=_make, secrets=_secrets)
