"""How a session runs a turn: the back called inside its boundary, deadlines, cancel, the end.

`TurnRunner` is a base class of `Session` (bridge/session/live.py): `Session.start_turn`
creates the `Turn` and starts `_run_turn` in the session's nursery. The turn runs under
one cancel scope, cancelled by the route's `turn_timeout_s`, by the manager's idle
watchdog (`turn_idle_timeout_s`), or after a cancel request the back did not honour
within `cancel_grace_s` (`_enforce_cancel`). Whatever the back raises fails this turn
only (STYLE.md rule 17). `_end_turn` resolves open questions as cancelled, emits
`TurnEnded`, and stores the turn's end before anyone waiting on `Turn.wait()` hears it.
A cancelled turn always ends `cancelled`, never as an error (ACP schema,
`session/cancel`: the agent answers the prompt with `stopReason: "cancelled"`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from bridge import telemetry
from bridge.backs.base import BackSession
from bridge.config import Route
from bridge.core.events import Event, QuestionAnswered, StopReason, TurnEnded, TurnError
from bridge.core.turn import TurnInput
from bridge.errors import BackError
from bridge.logs import set_log_ids
from bridge.session.turn import Turn
from bridge.store import SessionRecord, TurnRecord

__all__ = ["TurnRunner"]

log = logging.getLogger("bridge.session")
audit = logging.getLogger("bridge.audit")  # one line per turn, its own logger so it can be routed apart
_audit_json = msgspec.json.Encoder()


class TurnRunner:
    """The turn-running half of a `Session`; the session provides the attributes below."""

    id: str
    record: SessionRecord
    route: Route
    manager: Any  # bridge/session/live.py SessionOwner
    turn: Turn | None
    last_used: float
    _nursery: trio.Nursery | None
    _back_session: BackSession | None
    _unsaved_turns: dict[str, TurnRecord]

    # Provided by `Session` and its `Journal` (annotations only: no stub may shadow them).
    _emit: Callable[[Event], None]
    _ensure_back: Callable[[], Awaitable[BackSession]]
    _spawn: Callable[..., None]
    _changed: Callable[[], None]
    flush_or_close: Callable[[], Awaitable[None]]

    async def _end_cut_turn(self) -> None:
        """A turn still running when the session stops (cut off, or the session failed)
        ends here, so its clients hear it and the store has its end."""
        turn = self.turn
        if turn is None or not turn.machine.active or turn._done.is_set():
            return
        if turn.cancel_requested or self.manager.aborted:
            await self._end_turn(turn, StopReason.CANCELLED, None)
        else:
            error = TurnError(message="the session closed while the turn was running", kind="InternalError")
            await self._end_turn(turn, StopReason.FAILED, error)

    async def _run_turn(self, turn: Turn) -> None:
        set_log_ids(route=self.record.route, session=self.id, turn=turn.turn_id, **turn.trace.log_ids())
        log.info("turn started")
        stop, error = StopReason.END_TURN, None
        limit = self.route.turn_timeout_s
        idle_s = self.route.turn_idle_timeout_s
        # Cancelled by its deadline, by the manager's idle watchdog, or cut off after a
        # cancel request (`_enforce_cancel`).
        with trio.CancelScope(deadline=trio.current_time() + limit if limit else math.inf) as scope:
            turn.scope = scope
            if idle_s:
                self.manager.watch_idle(turn, idle_s)
            try:
                stop, error = await self._call_back(turn)
            finally:
                self.manager.unwatch_idle(turn)
        if turn.idled and not turn.cancel_requested:
            stop = StopReason.FAILED
            error = TurnError(message=f"the agent sent nothing for {idle_s:g} s (turn_idle_timeout_s)", kind="timeout")
        elif scope.cancelled_caught and not turn.cancel_requested:
            stop = StopReason.FAILED
            error = TurnError(message=f"turn exceeded the route's turn_timeout_s ({limit:g} s)", kind="timeout")
        if error is not None and self.manager.observer is not None:
            self.manager.observer.back_failed(self.record.route, error.kind or "BackError")
        if turn.cancel_requested:
            # ACP schema, `session/cancel`: once cancelled, the answer is `cancelled`, never an error.
            stop, error = StopReason.CANCELLED, None
        await self._end_turn(turn, stop, error)

    async def _call_back(self, turn: Turn) -> tuple[StopReason, TurnError | None]:
        """The back runs the turn inside its boundary (STYLE.md rule 17): whatever it
        raises becomes this turn's failure and a log line, never the session's end."""
        try:
            if turn.invocation is not None:
                # The back gets the prompt's messages; the log keeps what the user typed.
                with turn.trace.child("prompt.expand", prompt=turn.invocation.name):
                    turn.invocation.trace = turn.trace.carrier()
                    turn.prompt = await self.manager.prompts.expand(turn.invocation)
            back = await self._ensure_back()
            with turn.trace.back():
                stop = await back.prompt(turn)
                turn.trace.note(back_ref=self.record.back_ref)
            return stop, None
        except BackError as exc:
            log.warning("session %s turn %s: back failed: %s", self.id, turn.turn_id, exc.message)
            return StopReason.FAILED, TurnError(message=exc.message, kind=type(exc).__name__)
        except Exception as exc:  # a back is our code: our bug, and only this turn's
            log.exception("session %s turn %s: the back raised", self.id, turn.turn_id)
            message = f"internal error in the bridge's {self.record.route!r} back ({type(exc).__name__}); see its log"
            return StopReason.FAILED, TurnError(message=message, kind="InternalError")

    async def _end_turn(self, turn: Turn, stop: StopReason, error: TurnError | None) -> None:
        for qid in list(turn.machine.open_questions):
            turn._resolve(qid, QuestionAnswered(question_id=qid, cancelled=True, by="user"))
        turn.machine.apply(TurnInput.END)
        ended = TurnEnded(turn_id=turn.turn_id, stop_reason=stop, error=error)
        self._emit(ended)
        # The end record replaces a start record not yet flushed; either way it is
        # written after it (one flush at a time), with the last events and the session.
        record = turn.record
        if record is None:  # a turn made without `start_turn` (tests)
            record = turn.record = TurnRecord(turn_id=turn.turn_id, session_id=self.id, started_at=turn.started_at, first_seq=turn.first_seq)
        record.ended_at, record.last_seq = time.time(), ended.seq
        record.stop_reason, record.error = stop.value, error.message if error else None
        self._unsaved_turns[turn.turn_id] = record
        self.record.last_stop = stop.value
        with trio.CancelScope(shield=True):
            await self.flush_or_close()  # a store failure must not leave the turn's waiters hanging
        turn.trace.end(stop.value, error.kind if error else None, error.message if error else None)
        turn.ended = ended
        turn._done.set()
        self._changed()
        self.last_used = trio.current_time()
        for callback in turn._on_done:
            callback()
        turn._on_done.clear()
        seconds = time.monotonic() - turn.started
        first = turn.first_event_at - turn.started if turn.first_event_at is not None else None
        log.info("turn ended: %s after %.3f s", stop.value, seconds)
        config = getattr(self.manager, "config", None)  # a test's stand-in manager may have none
        if config is None or config.auth.audit:
            who, front = turn.identity, turn.front
            # Who, where, how it ended; never what was said (README: "Access control").
            line = {"who": who.key, "via": who.via, "subject": who.subject, "route": self.record.route, "front": front or self.record.front or "", "session": self.id,
                    "turn": turn.turn_id, "outcome": stop.value, "error": error.kind if error else None}  # fmt: skip
            audit.info("audit %s", _audit_json.encode(line).decode())
        if self.manager.observer is not None:
            self.manager.observer.turn_ended(self.record.route, stop.value, seconds, first, trace=telemetry.exemplar(turn.trace))

    def cancel(self) -> bool:
        """Ask the running turn to stop; it ends `cancelled` within `cancel_grace_s`.

        Synchronous, so a cancel read right after a prompt always finds its turn;
        telling the back happens in the session's nursery.
        """
        turn = self.turn
        if turn is None or not turn._request_cancel():
            return False
        self._spawn(self._enforce_cancel, turn)
        if self._back_session is not None:
            self._spawn(self._cancel_back, self._back_session)
        return True

    async def _cancel_back(self, back: BackSession) -> None:
        try:
            await back.cancel()
        except BackError as exc:
            log.warning("session %s: back could not cancel: %s", self.id, exc.message)
        except Exception:  # our bug in a back; the turn is still cut off by `_enforce_cancel`
            log.exception("session %s: back raised while cancelling", self.id)

    async def _enforce_cancel(self, turn: Turn) -> None:
        with trio.move_on_after(self.route.cancel_grace_s):
            await turn._done.wait()
            return
        if turn.scope is not None and not turn._done.is_set():
            log.warning("session %s: back did not stop within %gs; cut off", self.id, self.route.cancel_grace_s)
            turn.scope.cancel()

