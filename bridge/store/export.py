"""One session as JSON Lines (`agent-bridge store export SESSION`), read in pages.

Each line is `{"type": ..., "data": ...}`, in this order: the `session` record (with
its front states), each `turn` record by first sequence number, each `event` in the
canonical encoding (bridge/core/events.py, tagged by `event`), each A2A `task` row of
the session. Turns, events and tasks are read a page at a time and written as they
come, so a long history never sits in memory whole.

Secrets are not exported (STYLE.md rule 21): a push config's `token` and
`credentials`, and the values of an ACP editor's MCP server `env` and `headers`
entries (ACP `session/new` `mcpServers`), read `"<redacted>"`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from bridge.core.events import Event, decode_events
from bridge.errors import InternalError
from bridge.store.base import Store, StoredBatch

__all__ = ["REDACTED", "export_session", "redact"]

REDACTED = "<redacted>"
_SECRET_KEYS = frozenset({"token", "credentials"})
_NAMED_VALUES = frozenset({"env", "headers"})  # lists of {"name", "value"}
_TURNS_PER_READ = 256
_BATCHES_PER_READ = 64
_TASKS_PER_READ = 100

_encoder = msgspec.json.Encoder()


def redact(value: Any) -> Any:
    """`value` (JSON-able builtins) with its secrets replaced by `REDACTED`."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _SECRET_KEYS and item is not None:
                out[key] = REDACTED
            elif key in _NAMED_VALUES and isinstance(item, list):
                out[key] = [{**e, "value": REDACTED} if isinstance(e, dict) and "value" in e else redact(e) for e in item]
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _events(session_id: str, batch: StoredBatch) -> list[Event]:
    try:
        return decode_events(batch.blob)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InternalError(f"session {session_id}: stored events {batch.first_seq}..{batch.last_seq} do not decode: {exc}") from exc


def _line(kind: str, data: Any) -> bytes:
    return _encoder.encode({"type": kind, "data": data}) + b"\n"


async def export_session(store: Store, session_id: str, write: Callable[[bytes], object]) -> bool:
    """Write `session_id` as JSON Lines through `write`, one page of lines per call;
    False (nothing written) when the store has no such session."""
    record = await store.get_session(session_id)
    if record is None:
        return False
    write(_line("session", redact(msgspec.to_builtins(record))))
    after = 0
    while True:
        turns = await store.list_turns(session_id, after_seq=after, limit=_TURNS_PER_READ)
        if turns:
            write(b"".join(_line("turn", redact(msgspec.to_builtins(t))) for t in turns))
        if len(turns) < _TURNS_PER_READ:
            break
        after = turns[-1].first_seq
    after = 0
    while True:
        found = await store.read_batches(session_id, after_seq=after, limit=_BATCHES_PER_READ)
        events = [e for b in found for e in _events(session_id, b) if e.seq > after]
        if events:
            write(b"".join(_line("event", e) for e in events))
        if len(found) < _BATCHES_PER_READ:
            break
        after = found[-1].last_seq
    # A session's tasks are in its context: its own id, or for an A2A side session the
    # primary's (`ctx` of its A2A state, bridge/fronts/a2a/state.py).
    a2a = record.states.get("a2a") or {}
    context = a2a.get("ctx") if isinstance(a2a.get("ctx"), str) else None
    cursor = None
    while True:
        page = await store.list_tasks(route=record.route, context_id=context or session_id, limit=_TASKS_PER_READ, cursor=cursor)
        mine = [t for t in page.tasks if t.session_id == session_id]
        if mine:
            write(b"".join(_line("task", redact(msgspec.to_builtins(t))) for t in mine))
        if page.next is None:
            return True
        cursor = page.next
