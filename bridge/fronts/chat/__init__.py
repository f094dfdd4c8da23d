"""Chat front: the chat event stream on /ws, its REST API under /api/sessions, and the
canonical API beside it (a session's own events over SSE, its commands, the change feed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    access = Access(cfg, config.server, app.auth)
    streams = ChatStreams(cfg, manager)
    ws = WsFront(config, manager, streams, access)
    app.websocket("/ws", ws, origins=access.origins)
    app.background(ws.run)  # closes the sockets at shutdown, after the drain
    api = rest.register(app, config, manager, streams, access)
    _register_canonical(app, config, manager, api)


def _register_canonical(app: HttpApp, config: Config, manager: SessionManager, api: Any) -> None:
    from bridge.fronts.chat.events_api import CanonicalApi, Slots, sse_handler
    from bridge.fronts.chat.feed import ChangeFeed

    canonical = CanonicalApi(config, manager, api)
    feed = ChangeFeed(canonical)
    slots = Slots(canonical.cfg.max_event_streams)
    own = api.access.origins
    base = "/api/sessions/{session_id}"
    static = api.access.static
    app.add("GET", base + "/events", sse_handler(api, slots, canonical.open_events, canonical.serve_events), origins=own, static=static)
    app.add("GET", "/api/changes", sse_handler(api, slots, feed.open, feed.serve), origins=own, static=static)
    for verb in ("prompt", "answer", "cancel"):
        app.add("POST", f"{base}/{verb}", api.endpoint(getattr(canonical, verb)), origins=own, static=static)
    for path in (base + "/events", "/api/changes", *(f"{base}/{v}" for v in ("prompt", "answer", "cancel"))):
        app.add("OPTIONS", path, api.preflight, origins=own, public=True)  # a CORS preflight carries no credentials


def _secrets(cfg: WsFrontConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else (), files=(cfg.token_file,) if cfg.token_file else ())


FRONT = FrontKind(
    name="chat", section="ws", config=WsFrontConfig, register=_register, connections="ws", secrets=_secrets, reloadable=False
)
