"""What the chat front keeps with a session: the intent it was made with, and its headless runs.

`ChatSessionState` is stored as `SessionRecord.states["chat"]` (bridge/session/state.py;
a store of schema 2 kept these keys at the top level of `meta`, and its migration moved
them, bridge/store/sqlite.py):

- `intent`: the `POST /api/sessions` intent (Blade API docs, api/rest.md; shown by
  `GET /api/sessions/{id}`).
- `chat_runs`: turn id → the `RunOptions` a headless `chat:send` asked for (Blade API docs,
  api/chat-flow.md, headless and `output_schema`), with the output check's outcome once
  the run ended. The chat back reads it from the record's `states["chat"]` to pass the request on
  (bridge/backs/chat/server.py `run_options`), so `ws.py` writes it into the record at once.
"""

from __future__ import annotations

from typing import ClassVar

from bridge.schema.chat import RunOptions
from bridge.session import FrontState

__all__ = ["ChatSessionState"]


class ChatSessionState(FrontState):
    key: ClassVar[str] = "chat"

    intent: str | None = None
    chat_runs: dict[str, RunOptions] = {}
