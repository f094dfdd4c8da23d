"""How the REST API and its change feed show a session: one shape for both.

`SessionViews.info(record)` is a listing's item, `GET /api/sessions/{id}`'s body and the
payload of the change feed's `session` events. Its status comes from the summary the
record keeps (`turn_count`, `last_stop`, `last_cut`) and from the live session, never
from its turns, so showing a session costs the same however long its history is.

`front` is the front that opened it ("acp", "a2a", "chat", "mcp", "cli"; null: stored
before schema 4), `back` its route's back kind (null: the route is gone). `commands`
are a route's slash commands as a live session offers them: the back's own, then the
route's prompts (bridge/prompts/registry.py `merged`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bridge.core.events import CommandInfo
from bridge.errors import BridgeError
from bridge.fronts.chat.state import ChatSessionState
from bridge.fronts.chat.streams import turn_open
from bridge.session import SessionManager, decode_front_state
from bridge.store import SessionRecord

__all__ = ["SessionViews", "back_kind", "command_dicts", "iso"]

_STATUS = {"cancelled": "interrupted", "failed": "failed", "input_required": "waiting_for_input"}


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def back_kind(manager: SessionManager, route: str) -> str | None:
    """The back kind of `route` (its `kind` in `[routes.NAME.back]`); None: no such route."""
    r = manager.config.routes.get(route)
    return None if r is None else str(r.back.__struct_config__.tag)


def command_dicts(commands: list[CommandInfo]) -> list[dict[str, Any]]:
    return [{"name": c.name, "description": c.description, "hint": c.hint} for c in commands]


class SessionViews:
    __slots__ = ("manager",)

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def state(self, record: SessionRecord) -> ChatSessionState:
        live = self.manager.live(record.session_id)
        return live.front_state(ChatSessionState) if live is not None else decode_front_state(record.states, ChatSessionState)

    def status(self, record: SessionRecord) -> str:
        live = self.manager.live(record.session_id)
        if live is not None:
            if live.busy:
                return "waiting_for_input" if live.awaiting_answer else "running"
            record = live.record  # its summary is newer than the stored one
        if not record.turn_count:
            return "created"
        if turn_open(record) and not self.manager.cluster.solo:
            return "running"  # on another instance (or cut off, until the cluster closes it)
        if record.last_stop is None or record.last_cut:
            return "interrupted"  # the daemon stopped during it (closed at its next start)
        return _STATUS.get(record.last_stop, "completed")

    def route_commands(self, route: str) -> list[CommandInfo]:
        """The commands a new session of `route` offers: its back's own (those it declares
        before any session; none when the back cannot be made), then the route's prompts."""
        try:
            back = self.manager.back_for(route).info.commands
        except BridgeError:
            back = []
        return self.manager.prompts.merged(route, back)

    def commands(self, record: SessionRecord) -> list[CommandInfo]:
        live = self.manager.live(record.session_id)
        return live.commands() if live is not None else self.route_commands(record.route)

    def info(self, record: SessionRecord) -> dict[str, Any]:
        live = self.manager.live(record.session_id)
        turns = (live.record if live is not None else record).turn_count
        return {
            "session_id": record.session_id,
            "route": record.route,
            "title": record.title,
            "intent": self.state(record).intent,
            "status": self.status(record),
            "front": record.front,
            "back": back_kind(self.manager, record.route),
            "turn_count": turns,
            "created_at": iso(record.created_at),
            "updated_at": iso(record.updated_at),
        }
