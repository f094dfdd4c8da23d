"""A remote session's commands (bridge/session/remote.py): each goes to the instance
running the session live (bridge/cluster/base.py `Command`), and its error comes back
as the class the owner raised. A front's state and task rows changed here are sent
with `save_record` (`PutCmd`) and written by the owner, the session's one writer.

When the owner answers `Moved` (it let the session go) or cannot be reached and its
lease expired, `SessionManager.rehome` finds the session's new home and the command is
sent again there (`moved_to`); every later call goes there directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from bridge.cluster.base import (
    AnswerCmd,
    CancelCmd,
    Command,
    DescribeCmd,
    FlushCmd,
    Moved,
    OptionCmd,
    OwnerGone,
    PromptCmd,
    PutCmd,
    Reply,
    error_of,
)
from bridge.core.content import ContentBlock
from bridge.core.events import CommandInfo, ConfigOption
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import BackUnavailable, Busy
from bridge.session.state import FrontState, encode_front_state, load_front_state
from bridge.session.turn import new_id
from bridge.store import SessionRecord, TaskRecord

from bridge.session.remote_turn import FollowerHost, RemoteTurn

__all__ = ["Forwarding"]

log = logging.getLogger("bridge.session")


class Forwarding:
    """Mixed into `RemoteSession` (which sets what is declared here)."""

    manager: FollowerHost
    owner: str
    id: str
    record: SessionRecord
    moved_to: Any
    turn: RemoteTurn | None
    _front_states: dict[type[Any], FrontState]
    _staged: dict[str, TaskRecord]
    _commands: list[CommandInfo] | None
    _options: list[ConfigOption] | None

    busy: bool
    _turn_for: Callable[..., RemoteTurn]
    # -- commands -------------------------------------------------------------------
    async def _send(self, command: Command) -> Reply | None:
        """The owner's reply; None when the session moved (`moved_to` is its new home)."""
        try:
            reply = await self.manager.cluster.forward(self.owner, command)
        except OwnerGone:
            if isinstance(command, PromptCmd) and await self.manager.store.get_turn(command.turn_id) is not None:
                # It started there before its instance went silent: never run it twice.
                raise BackUnavailable(
                    f"the instance running session {self.id} stopped answering after starting this turn; "
                    "it ends as interrupted once that instance's lease expires"
                ) from None
            await self.manager.rehome(self, gone=True)
            return None
        error = error_of(reply)
        if isinstance(error, Moved):
            await self.manager.rehome(self)
            return None
        if error is not None:
            raise error
        return reply

    async def _tell_quietly(self, command: Command) -> None:
        try:
            await self.manager.cluster.forward(self.owner, command)
        except Exception as exc:  # a hint to the owner (flush sooner): losing it costs only latency
            log.info("session %s: %s not delivered to its owner: %s", self.id, type(command).__name__, exc)

    def check_limits(self, identity: Identity, front: str) -> None:
        """Nothing here: the owner counts the turns it runs (`begin_turn` is refused there)."""

    async def begin_turn(
        self, content: list[ContentBlock], *, message_id: str | None = None, meta: dict[str, Any] | None = None,
        turn_id: str | None = None, record_meta: dict[str, Any] | None = None,
        identity: Identity = ANONYMOUS, front: str = "",
    ) -> Any:  # fmt: skip
        if self.moved_to is not None:
            return await self.moved_to.begin_turn(content, message_id=message_id, meta=meta, turn_id=turn_id, record_meta=record_meta,
                                                  identity=identity, front=front)  # fmt: skip
        if self.busy:
            raise Busy(f"session {self.id} is already running a turn; cancel it or wait for it to end")
        if not self.manager.accepting:
            raise BackUnavailable(self.manager.refusal)
        tid = turn_id or new_id()
        cmd = PromptCmd(session_id=self.id, turn_id=tid, content=content, message_id=message_id, meta=meta, record_meta=record_meta or {},
                        identity=identity, front=front)  # fmt: skip
        reply = await self._send(cmd)
        if reply is None:
            return await self.begin_turn(content, message_id=message_id, meta=meta, turn_id=tid, record_meta=record_meta,
                                         identity=identity, front=front)  # fmt: skip
        turn = self._turn_for(tid, record=reply.turn)
        if not turn.prompt:
            turn.prompt, turn.message_id, turn.message_meta = content, message_id, meta
        if reply.turn is not None:
            turn.started_at, turn.first_seq = reply.turn.started_at, reply.turn.first_seq
        self.last_used = trio.current_time()
        return turn

    async def send_answer(self, question_id: str, **answer: Any) -> None:
        if self.moved_to is not None:
            return await self.moved_to.send_answer(question_id, **answer)
        if await self._send(AnswerCmd(session_id=self.id, question_id=question_id, **answer)) is None:
            return await self.send_answer(question_id, **answer)
        return None

    async def send_cancel(self) -> bool:
        if self.moved_to is not None:
            return bool(await self.moved_to.send_cancel())
        if self.turn is not None and self.turn.active:
            self.turn.cancel_requested = True
        reply = await self._send(CancelCmd(session_id=self.id))
        if reply is None:
            return await self.send_cancel()
        return bool(reply.value)

    def cancel(self) -> bool:
        """`send_cancel` from where a caller cannot wait (a client went away)."""
        if not self.busy:
            return False
        self.manager.lend_nursery().start_soon(self._cancel_quietly)
        return True

    async def _cancel_quietly(self) -> None:
        try:
            await self.send_cancel()
        except Exception as exc:
            log.warning("session %s: cancel not delivered to its owner: %s", self.id, exc)

    def answer(self, question_id: str, **answer: Any) -> None:
        """`send_answer` from where a caller cannot wait (a front cancelling its question)."""
        self.manager.lend_nursery().start_soon(self._answer_quietly, question_id, answer)

    async def _answer_quietly(self, question_id: str, answer: dict[str, Any]) -> None:
        try:
            await self.send_answer(question_id, **answer)
        except Exception as exc:
            log.warning("session %s: answer to %s not delivered: %s", self.id, question_id, exc)

    async def set_option(self, option_id: str, value: str) -> list[ConfigOption]:
        if self.moved_to is not None:
            return await self.moved_to.set_option(option_id, value)
        reply = await self._send(OptionCmd(session_id=self.id, option_id=option_id, value=value))
        if reply is None:
            return await self.set_option(option_id, value)
        self._options = reply.options or []
        return self._options

    async def describe(self) -> None:
        """What only the owner knows: its commands and options (asked once, then followed
        from the events). Not answered: none yet; a command will find where it lives."""
        reply = await self.manager.cluster.forward(self.owner, DescribeCmd(session_id=self.id))
        if reply.error is None:
            self._commands, self._options = reply.commands or [], reply.options or []

    def commands(self) -> list[CommandInfo]:
        if self.moved_to is not None:
            return self.moved_to.commands()
        return list(self._commands or [])

    def config_options(self) -> list[ConfigOption]:
        if self.moved_to is not None:
            return self.moved_to.config_options()
        return list(self._options or [])

    async def flush(self) -> None:
        if self.moved_to is not None:
            return await self.moved_to.flush()
        if await self._send(FlushCmd(session_id=self.id)) is None:
            return await self.flush()
        return None

    # -- front state ------------------------------------------------------------------
    def front_state(self, kind: type[Any]) -> Any:
        if self.moved_to is not None:
            return self.moved_to.front_state(kind)
        state = self.find_front_state(kind)
        if state is None:
            state = self._front_states[kind] = kind()
        return state

    def find_front_state(self, kind: type[Any]) -> Any:
        if self.moved_to is not None:
            return self.moved_to.find_front_state(kind)
        state = self._front_states.get(kind)
        if state is None:
            state, _ = load_front_state(self.record.states, kind)
            if state is not None:
                self._front_states[kind] = state
        return state

    def stage_task(self, task: TaskRecord) -> None:
        if self.moved_to is not None:
            return self.moved_to.stage_task(task)
        self._staged[task.task_id] = task
        return None

    async def save_record(self) -> None:
        """The front states changed here and the staged task rows, written by the owner."""
        if self.moved_to is not None:
            return await self.moved_to.save_record()
        states: dict[str, dict[str, Any]] = {}
        for state in self._front_states.values():
            raw, _ = encode_front_state(state)
            if self.record.states.get(state.key) != raw:
                states[state.key] = raw
        tasks, self._staged = list(self._staged.values()), {}
        if not states and not tasks:
            return None
        if await self._send(PutCmd(session_id=self.id, states=states, tasks=tasks)) is None:
            for task in tasks:
                self._staged.setdefault(task.task_id, task)
            return await self.save_record()
        self.record.states.update(states)
        return None
