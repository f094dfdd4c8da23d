"""What the chat front keeps with a session: the intent it was made with, and its headless runs.

`ChatSessionState` lives at the top level of `SessionRecord.meta` (bridge/session/state.py,
`meta_key = None`), under the keys this front has always written, so older records read
back unchanged:

- `intent`: the `POST /api/sessions` intent (Blade API docs, api/rest.md; shown by
  `GET /api/sessions/{id}`).
- `chat_runs`: turn id → the `RunOptions` a headless `chat:send` asked for (Blade API docs,
  api/chat-flow.md, headless and `output_schema`), with the output check's outcome once
  the run ended. The chat back reads it from the record to pass the request on
  (bridge/backs/chat/server.py `run_options`), so `ws.py` writes it into the record at once.
"""

from __future__ import annotations

from typing import ClassVar

from bridge.schema.chat import RunOptions
from bridge.session import FrontState

__all__ = ["ChatSessionState"]


class ChatSessionState(FrontState):
    meta_key: ClassVar[str | None] = None  # flat: its fields are keys of `meta`

    intent: str | None = None
    chat_runs: dict[str, RunOptions] = {}
