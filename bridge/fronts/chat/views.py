"""How the REST API and its change feed show a session: one shape for both.

`SessionViews.info(record)` is a listing's item, `GET /api/sessions/{id}`'s body and the
payload of the change feed's `session` events. Its status comes from the summary the
record keeps (`turn_count`, `last_stop`, `last_cut`) and from the live session, never
from its turns, so showing a session costs the same however long its history is.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bridge.fronts.chat.state import ChatSessionState
from bridge.fronts.chat.streams import turn_open
from bridge.session import SessionManager, decode_front_state
from bridge.store import SessionRecord

__all__ = ["SessionViews", "iso"]

_STATUS = {"cancelled": "interrupted", "failed": "failed", "input_required": "waiting_for_input"}


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


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

    def info(self, record: SessionRecord) -> dict[str, Any]:
        return {
            "session_id": record.session_id,
            "route": record.route,
            "title": record.title,
            "intent": self.state(record).intent,
            "status": self.status(record),
            "created_at": iso(record.created_at),
            "updated_at": iso(record.updated_at),
        }
