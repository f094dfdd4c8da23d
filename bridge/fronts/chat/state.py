"""What the chat front keeps with a session: the intent it was made with.

`ChatSessionState` is stored as `SessionRecord.states["chat"]` (bridge/session/state.py;
a store of schema 2 kept these keys at the top level of `meta`, and its migration moved
them, bridge/store/sqlite.py):

- `intent`: the `POST /api/sessions` intent (Blade API docs, api/rest.md; shown by
  `GET /api/sessions/{id}`).
- `chat_runs`: read only, for stores written before: turn id → the `RunOptions` a
  headless `chat:send` asked for. A run's options are now kept with its turn
  (bridge/fronts/chat/runs.py), so this state no longer grows with every headless run;
  nothing adds to it.
"""

from __future__ import annotations

from typing import ClassVar

from bridge.schema.chat import RunOptions
from bridge.session import FrontState

__all__ = ["ChatSessionState"]


class ChatSessionState(FrontState):
    key: ClassVar[str] = "chat"

    intent: str | None = None
    chat_runs: dict[str, RunOptions] = {}  # read only (see above)
