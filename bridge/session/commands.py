"""A live session's commands as a front sends them: begin a turn, answer a question,
cancel, set an option (bridge/session/live.py mixes this into `Session`). The awaitable
ones (`begin_turn`, `send_answer`, `send_cancel`) are what fronts call, so the same front
code drives a session another instance runs (bridge/session/forwarding.py has the same
methods, forwarded)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from msgspec.structs import replace

from bridge.backs.base import BackSession
from bridge.config import Route
from bridge.core.content import ContentBlock
from bridge.core.identity import ANONYMOUS, Identity
from bridge.core.events import ConfigOption, ConfigValue, Event, OptionsChanged, QuestionAnswered
from bridge.errors import InvalidParams, NotFound
from bridge.session.limits import Admission
from bridge.session.turn import Turn, check_answer
from bridge.store import SessionRecord

__all__ = ["Commands"]


class Commands:
    """Mixed into `Session` (which sets what is declared here)."""

    id: str
    manager: Any  # its SessionManager (`limits`: bridge/session/limits.py)
    record: SessionRecord
    route: Route
    turn: Turn | None
    back_options: list[ConfigOption]
    _back_session: BackSession | None
    start_turn: Callable[..., Turn]
    cancel: Callable[[], bool]
    _emit: Callable[[Event], None]
    save_record: Callable[[], Awaitable[None]]

    async def begin_turn(
        self, content: list[ContentBlock], *, message_id: str | None = None, meta: dict[str, Any] | None = None,
        turn_id: str | None = None, record_meta: dict[str, Any] | None = None,
        identity: Identity = ANONYMOUS, front: str = "",
    ) -> Turn:  # fmt: skip
        """`start_turn`, awaitable: on another instance's session (`RemoteSession`) the
        owner starts it and answers. `turn_id`: chosen by a forwarding instance;
        `record_meta`: put in the turn's record (`TurnRecord.meta`) as it starts.

        `identity`: who asks (the turn carries it to the back, and `[limits]` count it);
        `front`: which front asks (a label of the refusals metric). `RateLimited` when a
        limit is reached (bridge/session/limits.py): then no turn begins."""
        limits = getattr(self.manager, "limits", None)  # a SessionManager's (a test's stand-in may have none)
        release = limits.admit(self.record.route, identity, front=front) if limits is not None else Admission((), ())
        try:
            turn = self.start_turn(content, message_id=message_id, meta=meta, turn_id=turn_id, record_meta=record_meta)
        except BaseException:
            release.refund()  # refused (busy, an unknown /command): it took no turn of the caller's minute
            raise
        turn.identity, turn.front = identity, front
        turn.when_done(release)
        return turn

    def check_limits(self, identity: Identity, front: str) -> None:
        """`RateLimited` if a turn of `identity` would be refused now (bridge/session/limits.py
        `check`); nothing is taken."""
        limits = getattr(self.manager, "limits", None)
        if limits is not None:
            limits.check(self.record.route, identity, front=front)

    async def send_answer(self, question_id: str, **answer: Any) -> None:
        """`answer`, awaitable: its errors (no such question, an answer that does not fit)
        reach the caller even when the question is open on another instance."""
        self.answer(question_id, **answer)

    async def send_cancel(self) -> bool:
        """`cancel`, awaitable: whether a running turn was asked to stop."""
        return self.cancel()

    def answer(
        self,
        question_id: str,
        *,
        selected: list[str] | None = None,
        text: str | None = None,
        values: dict[str, Any] | None = None,
        cancelled: bool = False,
        by: Literal["user", "front"] = "user",
    ) -> None:
        """Answer an open question; InvalidParams if the answer does not fit it.

        `by="front"` (with `cancelled`): the front had no way to show the question,
        so the back may ask in the chat instead (the A2A back does: bridge/backs/a2a/turn.py).
        """
        turn = self.turn
        question = turn.open_question(question_id) if turn else None
        if turn is None or question is None:
            raise NotFound(f"no open question {question_id!r} in session {self.id}")
        selected = selected or []
        if not cancelled:
            check_answer(question, selected, text, values)
        turn._resolve(
            question_id,
            QuestionAnswered(
                question_id=question_id, selected=selected, text=text, values=values, cancelled=cancelled, by=by
            ),
        )

    # -- options --------------------------------------------------------------------
    def config_options(self) -> list[ConfigOption]:
        """The route's options, then those the back's agent offers (route ids win)."""
        own = [
            ConfigOption(
                id=o.id,
                name=o.name,
                current=self.record.options.get(o.id, o.default or o.values[0].value),
                values=[ConfigValue(value=v.value, name=v.name, description=v.description) for v in o.values],
                description=o.description,
                category=o.category,
            )
            for o in self.route.options
        ]
        ids = {o.id for o in own}
        return own + [o for o in self.back_options if o.id not in ids]

    async def set_option(self, option_id: str, value: str) -> list[ConfigOption]:
        spec = next((o for o in self.route.options if o.id == option_id), None)
        offered = None if spec is not None else next((o for o in self.back_options if o.id == option_id), None)
        if spec is None and offered is None:
            raise InvalidParams(f"unknown option {option_id!r}; options are {[o.id for o in self.config_options()]}")
        values = [v.value for v in (spec or offered).values]  # type: ignore[union-attr]
        if value not in values:
            raise InvalidParams(f"{value!r} is not a value of {option_id!r}: {values}")
        self.record.options[option_id] = value
        if self._back_session is not None:
            await self._back_session.set_option(option_id, value)
        if offered is not None:
            self.back_options = [replace(o, current=value) if o.id == option_id else o for o in self.back_options]
        options = self.config_options()
        self._emit(OptionsChanged(options=options))
        await self.save_record()
        return options
