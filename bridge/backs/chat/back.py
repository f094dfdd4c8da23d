"""The chat back: turns run on a remote agent platform that speaks the chat event stream.

Two dialects: "ws" is the JSON frames of our own `/ws`, so one agent-bridge can route
to another; "socketio" is Blade's Socket.IO API (Engine.IO v4 over WebSocket only,
`codecs.socketio`; Blade `api/websocket.md`). One `ChatBack` per route: its chat
server (`bridge.backs.chat.server`: URLs, token, REST), the WebSocket half
(`bridge.backs.chat.link`: one connection, either dialect), the sessions
(`bridge.backs.chat.session`) and their turns (`bridge.backs.chat.turn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bridge.backs.base import AgentInfo, SessionContext
from bridge.backs.chat.link import check
from bridge.backs.chat.server import ChatServer
from bridge.backs.chat.session import ChatSession

if TYPE_CHECKING:
    from bridge.config import Route

__all__ = ["ChatBack"]


class ChatBack:
    """The back of one route whose `back.kind` is "chat"."""

    def __init__(self, name: str, route: Route) -> None:
        self.name = name
        self.route = route
        self.info = AgentInfo(name=name, title=route.title, version=route.version, description=route.description)
        self.server = ChatServer(name, route)

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> ChatSession:
        return ChatSession(self.server, ctx)

    async def ready(self) -> None:
        """The platform is reached per session: nothing to look up first."""

    async def probe(self, *, deep: bool) -> str:
        """`doctor` and `/readyz`: connect and authenticate, then leave."""
        return await check(self.server)

    async def aclose(self) -> None:
        await self.server.aclose()
