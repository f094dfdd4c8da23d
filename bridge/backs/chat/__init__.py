"""Chat back: a remote chat-event-stream server (WebSocket or Socket.IO)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.backs.chat.config import ChatBackConfig
from bridge.registry import BackKind, SecretRefs

if TYPE_CHECKING:
    from bridge.backs.base import Back
    from bridge.config import Route

__all__ = ["BACK"]


def _make(name: str, route: Route) -> Back:
    from bridge.backs.chat.back import ChatBack

    return ChatBack(name, route)


def _secrets(cfg: ChatBackConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else (), files=(cfg.token_file,) if cfg.token_file else ())


BACK = BackKind(kind="chat", config=ChatBackConfig, factory=_make, secrets=_secrets)
