"""Headless runs' options, kept with each run's turn record, never in the session's state.

A headless `chat:send` (Blade API docs, api/chat-flow.md: `headless`, `output_schema`)
asks for `RunOptions` that hold for its run alone. They are kept in that run's turn
record, as builtins under `TurnRecord.meta[RUN_META_KEY]`:

- given by the `chat:send` as its turn starts (`run_meta`, the turn's `record_meta`,
  bridge/fronts/chat/ws_connection.py; on the instance that runs the session, wherever
  the client is), so they are stored with the turn's start record, and the chat back
  reads them from the running turn's record to pass them on
  (bridge/backs/chat/server.py `run_options`);
- the output check's outcome (`RunOptions.check`) is added by the live stream as the
  session delivers the run's `TurnEnded`, before it stages the turn's end record
  (bridge/session/running.py `_end_turn`): the end record carries it, so reads and
  replays never validate again. A run that ended with no client watching (its sender
  left) is checked by each read: a reader writes no turn's meta.

So a session's state does not grow with its runs and nothing of earlier runs is
encoded again at a flush (issue 16). Stores written before kept them in the chat
front's state (`ChatSessionState.chat_runs`, bridge/fronts/chat/state.py): read as a
fallback, never written.

`RunBook` is where one projector finds them (its `run_options` and `keep_check`,
bridge/codecs/chat.py): on the live session's running turn's record, on the records of
the turns a pass over the stored log is feeding (`note`, called by
bridge/fronts/chat/replay.py `feed_stored`), then in the old state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from bridge.fronts.chat.state import ChatSessionState
from bridge.schema.chat import RunOptions
from bridge.session import Session, stored_front_state
from bridge.store import SessionRecord, TurnRecord

__all__ = ["RUN_META_KEY", "RunBook", "keep_run", "run_meta", "run_of"]

log = logging.getLogger("bridge.fronts.chat")

RUN_META_KEY = "chat_run"  # in `TurnRecord.meta`: the run's `RunOptions`, as builtins


def keep_run(record: TurnRecord | None, options: RunOptions) -> None:
    """Keep `options` with the run whose turn has `record` (written with its next flush)."""
    if record is not None:
        record.meta[RUN_META_KEY] = msgspec.to_builtins(options)


def run_meta(options: RunOptions) -> dict[str, Any]:
    """What a run's turn record starts with (`Session.begin_turn(record_meta=...)`)."""
    return {RUN_META_KEY: msgspec.to_builtins(options)}


def run_of(meta: Mapping[str, Any]) -> RunOptions | None:
    """The run options kept in a turn's `meta`; None when it was not a headless run, or
    they do not decode (a record edited by hand: the run reads as an ordinary one)."""
    raw = meta.get(RUN_META_KEY)
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, RunOptions)
    except msgspec.ValidationError as exc:
        log.warning("a turn's %s does not decode (%s); read as an ordinary run", RUN_META_KEY, exc)
        return None


class RunBook:
    """The run options one projector reads (see the module docstring)."""

    __slots__ = ("_live", "_old", "_page", "_before")

    def __init__(self, live: Session | None, old: Mapping[str, RunOptions]) -> None:
        self._live = live
        self._old = old
        self._page: dict[str, RunOptions] = {}  # the headless runs of the turns being fed
        self._before: dict[str, RunOptions] = {}  # ... and of the page before (its last run may end now)

    @classmethod
    def of_session(cls, session: Session) -> RunBook:
        state = session.find_front_state(ChatSessionState)  # never makes one: nothing to write
        return cls(session, state.chat_runs if state is not None else {})

    @classmethod
    def of_record(cls, record: SessionRecord) -> RunBook:
        state = stored_front_state(record.states, ChatSessionState)
        return cls(None, state.chat_runs if state is not None else {})

    def note(self, turns: Iterable[TurnRecord]) -> None:
        """The records of the next page of turns whose stored events are fed."""
        self._before, self._page = self._page, {t.turn_id: o for t in turns if (o := run_of(t.meta)) is not None}

    def options(self, turn_id: str) -> RunOptions | None:
        record = self._running(turn_id)
        if record is not None:
            return run_of(record.meta)
        for runs in (self._page, self._before, self._old):
            found = runs.get(turn_id)
            if found is not None:
                return found
        return None

    def keep(self, turn_id: str, check: dict[str, Any]) -> None:
        """The run's check, on the running turn's record: stored with the turn's end
        when the live stream computes it as the session delivers that end."""
        record = self._running(turn_id)
        raw = record.meta.get(RUN_META_KEY) if record is not None else None
        if isinstance(raw, dict):
            raw["check"] = check

    def _running(self, turn_id: str) -> TurnRecord | None:
        """The live record of the session's current (or last) turn, if it is `turn_id`."""
        turn = self._live.turn if self._live is not None else None
        return turn.record if turn is not None and turn.turn_id == turn_id else None
