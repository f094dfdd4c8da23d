"""One bridge session on a chat server, and how each of its prompts starts a turn.

The remote session (Blade `api/rest.md`, `POST /api/sessions`) is made at the first
prompt (intent = that prompt) and kept as the back ref; a session loaded later
finds it again (or makes a new one if the server forgot it). Each prompt is one
`ChatTurn` (`bridge.backs.chat.turn`); a question the turn left in the chat
(`input_required`) is answered by the next prompt.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from msgspec.structs import replace

from bridge.backs.base import SessionContext, TurnHandle
from bridge.backs.chat.server import ChatServer, run_options
from bridge.backs.chat.turn import ChatTurn, Outgoing
from bridge.codecs import chat_client
from bridge.codecs.chat_client import ChatFollower
from bridge.core import events as ev
from bridge.core.content import text_of
from bridge.errors import BackError

__all__ = ["ChatSession"]

log = logging.getLogger("bridge.backs.chat.back")


class ChatSession:
    """One bridge session on the chat server: its remote session, and a question left for the next prompt."""

    def __init__(self, server: ChatServer, ctx: SessionContext) -> None:
        self.server = server
        self.ctx = ctx
        self.remote_id: str | None = ctx.back_ref
        self.follower: ChatFollower | None = None
        self.pending_ask: ev.Question | None = None  # shown as text: the next prompt answers it

    async def set_option(self, option_id: str, value: str) -> None:
        pass  # sent with each chat:send (mode, model)

    async def cancel(self) -> None:
        pass  # the turn watches `turn.wait_cancel_requested()` itself

    async def aclose(self) -> None:
        pass  # connections belong to turns; the HTTP client to the back

    async def _follow(self, turn: TurnHandle, options: dict[str, str]) -> ChatFollower:
        if self.follower is not None:
            return self.follower
        server = self.server
        if self.remote_id is not None:
            exists, sequence = await server.find_session(self.remote_id)
            if exists:
                self.follower = ChatFollower(self.remote_id, last_seq=sequence)
                return self.follower
            log.info("route %s: the chat server no longer has session %s; starting a new one", server.name, self.remote_id)
        self.remote_id = await server.create_session(text_of(turn.prompt)[:2000], options)
        turn.set_back_ref(self.remote_id)
        self.follower = ChatFollower(self.remote_id, last_seq=0)
        return self.follower

    async def prompt(self, turn: TurnHandle) -> ev.StopReason:
        if turn.cancel_requested:
            return ev.StopReason.CANCELLED
        options = self.server.remote_options(turn.options)
        follower = await self._follow(turn, options)
        follower.start_turn(turn.turn_id)
        assert self.remote_id is not None
        ask, self.pending_ask = self.pending_ask, None
        if ask is not None:
            # The question was shown as text: this prompt is its answer (`chat_client.answer_from_text`).
            answer = chat_client.answer_from_text(ask, text_of(turn.prompt))
            first = Outgoing("chat:send", chat_client.send_answer(self.remote_id, ask, answer), ask.id)
        else:
            headless, schema = run_options(self.ctx.host, turn.turn_id)
            payload = chat_client.send_message(
                self.remote_id,
                turn.prompt,
                mode=options.get("mode"),
                model=options.get("model"),
                headless=headless,
                output_schema=schema,
            )
            first = Outgoing("chat:send", replace(payload, **turn.trace.carrier()))  # W3C traceparent, tracestate
        send, receive = trio.open_memory_channel[Any](self.server.cfg.queue_max_frames)
        outcome: ev.StopReason | BackError | None = None
        async with trio.open_nursery() as nursery:
            run = ChatTurn(self.server, turn, follower, nursery, send, receive)
            try:
                outcome = await run.loop(first)
            finally:
                if run.left_question is not None:
                    self.pending_ask = run.left_question
                await run.finish(outcome)  # also when cut off (turn_timeout_s, cancel_grace_s)
            nursery.cancel_scope.cancel()
        assert outcome is not None
        if isinstance(outcome, BackError):
            raise outcome
        return outcome
