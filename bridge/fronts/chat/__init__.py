"""Chat front: the chat event stream on /ws and its REST API under /api/sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.fronts.chat.config import WsFrontConfig
from bridge.registry import FrontKind, SecretRefs

if TYPE_CHECKING:
    from bridge.config import Config
    from bridge.fronts.http import HttpApp
    from bridge.session import SessionManager

__all__ = ["FRONT"]


def _register(app: HttpApp, config: Config, manager: SessionManager) -> None:
    # The event names and payloads of blade-hq/public-docs `api/chat-flow.md`, as JSON
    # frames over a plain WebSocket, and `api/rest.md`'s session history.
    from bridge.fronts.chat import rest
    from bridge.fronts.chat.access import Access
    from bridge.fronts.chat.streams import ChatStreams
    from bridge.fronts.chat.ws import WsFront

    cfg = config.section(WsFrontConfig)
    access = Access(cfg, config.server)
    streams = ChatStreams(cfg, manager)
    ws = WsFront(config, manager, streams, access)
    app.websocket("/ws", ws, origins=access.origins)
    app.background(ws.run)  # closes the sockets at shutdown, after the drain
    rest.register(app, config, manager, streams, access)


def _secrets(cfg: WsFrontConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else (), files=(cfg.token_file,) if cfg.token_file else ())


FRONT = FrontKind(
    name="chat", section="ws", config=WsFrontConfig, register=_register, connections="ws", secrets=_secrets, reloadable=False
)
