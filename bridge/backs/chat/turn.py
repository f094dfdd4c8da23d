"""One turn in flight on a chat server (the policy half of the chat back).

A turn is one `chat:send` (Blade `api/chat-flow.md`) on its own connection
(`bridge.backs.chat.link`): subscribe, send once the subscription is acknowledged,
follow the frames (`ChatFollower`) until the run's `chat:end`. All it waits for
comes through one bounded inbox, in order: frames, the acknowledgement, a dropped
connection, the user's answers, a cancel request.

- AskUserQuestion (Blade `api/chat-flow.md`, AskUserQuestion): asked through the
  front (`turn.ask`) while frames keep flowing; a `chat:end(completed)` that only
  pauses the run does not end the turn. The answer goes back as
  `chat:send {askuser_answer}` on the same session (for Socket.IO once the paused
  `chat:end` arrived: Blade's loop has returned by then). Declined → `chat:stop`,
  `cancelled`. A front that cannot show it, or no answer in time: the question is
  written into the chat, the turn ends `input_required`, and the next prompt is
  sent as the answer (`left_question`).
- Cancel (`chat:stop`, Blade `api/chat-flow.md`): then wait (most of
  `cancel_grace_s`) for `chat:end(interrupted)`. A turn that fails or is cut off
  also says `chat:stop`.
- A dropped connection: reconnect with backoff, re-subscribe after the last sequence
  seen; the follower skips what it already had. A run that cannot be resumed fails
  the turn, saying why.
- Deadlines: `connect_timeout_s` for the subscription, `first_event_timeout_s` from a
  send to the run's first frame, then `idle_timeout_s` of silence; none while a
  question waits for the user (the session bounds that).
"""

from __future__ import annotations

import logging
import math
from typing import Any, NamedTuple

import trio

from bridge.backs.base import TurnHandle
from bridge.backs.chat.link import Dropped, Frame, Link, Subscribed
from bridge.backs.chat.server import ChatServer, where
from bridge.codecs import chat_client
from bridge.codecs.chat_client import ChatFollower
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.errors import BackError, BackUnavailable, PeerError

__all__ = ["ChatTurn", "Outgoing"]

log = logging.getLogger("bridge.backs.chat.back")


class _Answered(NamedTuple):
    question: ev.Question
    answer: ev.QuestionAnswered


class _CancelAsked(NamedTuple):
    pass


class Outgoing(NamedTuple):
    """A write that waits for the subscription; `answers` is the question it answers."""

    event: str
    data: Any
    answers: str | None = None


class ChatTurn:
    """One turn in flight on the chat server: one `chat:send` until its `chat:end` (see the module docstring)."""

    def __init__(
        self,
        server: ChatServer,
        turn: TurnHandle,
        follower: ChatFollower,
        nursery: trio.Nursery,
        send: trio.MemorySendChannel[Any],
        receive: trio.MemoryReceiveChannel[Any],
    ) -> None:
        self.server = server
        self.cfg = server.cfg
        self.left_question: ev.Question | None = None  # shown as text: the next prompt answers it
        self.turn = turn
        self.follower = follower
        self.nursery = nursery
        self.send = send
        self.receive = receive
        self.link: Link | None = None
        self.gen = 0
        self.reconnects = 0
        self.subscribed = False
        self.outbox: list[Outgoing] = []
        # Socket.IO (Blade): an answer waits for the run's paused chat:end (Blade `api/chat-flow.md`, AskUserQuestion: the
        # loop returns, then a new chat:send resumes it), at most `connect_timeout_s`.
        self.held: list[Outgoing] = []
        self.hold_until = math.inf
        self.asking: set[str] = set()
        self.cancelling = False
        self.stop_sent = False
        self.sent_prompt = False
        now = trio.current_time()
        self.cancel_deadline = math.inf
        self.connected_at = now
        self.sent_at = now
        self.last_frame = now

    @property
    def remote_id(self) -> str:
        return self.follower.session_id

    # -- the loop ----------------------------------------------------------------------
    async def loop(self, first: Outgoing) -> ev.StopReason | BackError:
        """The turn's outcome: a stop reason, or the error it failed with (not raised,
        so that it leaves the nursery unwrapped)."""
        self.nursery.start_soon(self._watch_cancel)
        self.outbox.append(first)
        try:
            # Live from now: this turn has no use for earlier runs' frames (a resume
            # after a dropped socket asks for what it missed, `_dropped`).
            await self._connect(None)
            while True:
                outcome: ev.StopReason | BackError | None
                item = await self._next()
                if item is None and self.held and trio.current_time() >= self.hold_until:
                    log.info("route %s: no chat:end after the question in time; answering anyway", self.server.name)
                    await self._release()
                    continue
                if item is None:
                    outcome = self._timed_out()
                elif isinstance(item, Frame):
                    outcome = await self._frame(item)
                elif isinstance(item, Subscribed):
                    outcome = await self._subscribed(item)
                elif isinstance(item, Dropped):
                    outcome = await self._dropped(item)
                elif isinstance(item, _Answered):
                    outcome = await self._answered(item)
                else:
                    outcome = await self._cancel_asked()
                if outcome is not None:
                    return outcome
        except BackError as exc:
            return exc

    async def _next(self) -> Any:
        if self.cancelling:
            deadline = self.cancel_deadline
        elif not self.subscribed:
            deadline = self.connected_at + self.cfg.connect_timeout_s
        elif self.asking or self.follower.paused:
            deadline = math.inf  # the user is being asked: the session bounds that
        elif not self.follower.run_seen:
            deadline = self.sent_at + self.cfg.first_event_timeout_s
        else:
            deadline = self.last_frame + self.cfg.idle_timeout_s
        with trio.move_on_at(min(deadline, self.hold_until)):
            return await self.receive.receive()
        return None

    def _timed_out(self) -> ev.StopReason | BackError:
        at, cfg = where(self.cfg.url), self.cfg
        if self.cancelling:
            log.info("route %s: no chat:end after chat:stop in time; the turn ends cancelled", self.server.name)
            return ev.StopReason.CANCELLED
        if not self.subscribed:
            why = f"did not acknowledge session:subscribe within connect_timeout_s ({cfg.connect_timeout_s:g} s)"
        elif not self.follower.run_seen:
            why = f"sent nothing within first_event_timeout_s ({cfg.first_event_timeout_s:g} s) of chat:send"
        else:
            why = f"sent nothing for idle_timeout_s ({cfg.idle_timeout_s:g} s)"
        return self.server.error(f"the chat server at {at} {why}", unavailable=True)

    # -- items -------------------------------------------------------------------------
    async def _frame(self, item: Frame) -> ev.StopReason | BackError | None:
        if item.gen != self.gen:
            return None  # from a link we already left
        if not self.subscribed and not self.sent_prompt:
            # Before this turn sent anything: a refusal of the subscription, or earlier
            # runs' frames (one that ended early on `system:error` may still have its
            # `chat:end` to come).
            refused = self.follower.skip(item.data)
            if refused is not None:
                return self.server.error(f"the chat server refused to follow session {self.remote_id}: {refused}")
            return None
        self.last_frame = trio.current_time()
        self.reconnects = 0  # the stream moves again
        try:
            events = self.follower.feed(item.data)
        except PeerError as exc:
            return self.server.error(f"the chat server at {where(self.cfg.url)} sent a frame that is not a chat frame: {exc.message}")
        turn = self.turn
        for e in events:
            if isinstance(e, ev.QuestionAsked):
                self.asking.add(e.question.id)
                self.nursery.start_soon(self._ask, e)
            elif isinstance(e, ev.TurnEnded):
                return self._ended(e)
            else:
                turn.emit(e)
        await turn.flow()
        if self.cancelling and self.follower.paused:
            return ev.StopReason.CANCELLED  # nothing runs remotely any more
        if self.held and self.follower.paused:
            await self._release()
        return None

    async def _release(self) -> None:
        held, self.held, self.hold_until = self.held, [], math.inf
        for out in held:
            await self._send(out)

    def _ended(self, e: ev.TurnEnded) -> ev.StopReason | BackError:
        if self.cancelling or self.turn.cancel_requested:
            return ev.StopReason.CANCELLED
        if e.stop_reason is ev.StopReason.FAILED:
            message = e.error.message if e.error else "the run failed"
            if not self.subscribed:
                return self.server.error(f"the chat server refused to follow session {self.remote_id}: {message}")
            return self.server.error(f"the chat agent failed: {message}")
        return e.stop_reason

    async def _subscribed(self, item: Subscribed) -> ev.StopReason | BackError | None:
        if item.gen != self.gen:
            return None
        if not item.ok:
            after = f" after sequence {self.follower.last_seq}" if self.follower.known and self.gen > 1 else ""
            return self.server.error(f"the chat server refused to follow session {self.remote_id}{after}: {item.message}")
        self.follower.learn(item.sequence)
        self.subscribed = True
        waiting, self.outbox = self.outbox, []
        for out in waiting:
            await self._send(out)
        return None

    async def _send(self, out: Outgoing) -> None:
        """Write now if subscribed, else when the (next) subscription is acknowledged."""
        if not self.subscribed or self.link is None or not await self.link.emit(out.event, out.data):
            self.outbox.append(out)
            return
        if out.event != "chat:send":
            return
        self.sent_prompt = True
        self.follower.sent(out.answers)  # an answer: the question no longer holds the run open (Blade `api/chat-flow.md`, AskUserQuestion)
        self.sent_at = trio.current_time()

    async def _dropped(self, item: Dropped) -> ev.StopReason | BackError | None:
        if item.gen != self.gen:
            return None
        self.subscribed = False
        reason = item.reason
        cfg = self.cfg
        # Attempts count until a frame arrives again: a server that accepts and then
        # fails every connection runs them out too.
        while self.reconnects < cfg.reconnect_attempts:
            if self.turn.cancel_requested and not self.sent_prompt:
                return ev.StopReason.CANCELLED
            self.reconnects += 1
            attempt = self.reconnects
            log.info("route %s: the connection to the chat server dropped (%s); reconnecting (attempt %d)",
                     self.server.name, reason, attempt)  # fmt: skip
            await trio.sleep(min(cfg.reconnect_backoff_s * 2 ** (attempt - 1), cfg.reconnect_max_backoff_s))
            try:
                await self._connect(self.follower.last_seq if self.follower.known else None)
                return None
            except BackUnavailable as exc:
                reason = exc.message
        if self.cancelling:
            return ev.StopReason.CANCELLED
        return self.server.error(
            f"the connection to the chat server at {where(cfg.url)} dropped during the run and could not be "
            f"resumed after {cfg.reconnect_attempts} attempts: {reason}",
            unavailable=True,
        )

    async def _answered(self, item: _Answered) -> ev.StopReason | BackError | None:
        q, answer = item
        self.asking.discard(q.id)
        if self.cancelling or self.turn.cancel_requested:
            return None
        if answer.cancelled and answer.by in ("front", "timeout"):
            # Nobody could answer in the front: the question goes into the chat and the
            # user's next prompt answers it (the last resort, `chat_client.question_text`).
            self.turn.emit(ev.MessageChunk(content=TextContent(text=chat_client.question_text(q)), message_id=f"ask:{q.id}"))
            self.left_question = q
            return ev.StopReason.INPUT_REQUIRED
        if answer.cancelled:
            # Declined or dismissed: stop the run (`chat:stop`; the turn ends cancelled).
            return await self._stop()
        out = Outgoing("chat:send", chat_client.send_answer(self.remote_id, q, answer), q.id)
        if self.cfg.dialect == "socketio" and not self.follower.paused:
            self.held.append(out)
            self.hold_until = min(self.hold_until, trio.current_time() + self.cfg.connect_timeout_s)
            return None
        await self._send(out)
        return None

    async def _cancel_asked(self) -> ev.StopReason | None:
        if self.cancelling:
            return None
        if not self.sent_prompt:
            return ev.StopReason.CANCELLED  # nothing was sent: nothing runs remotely
        return await self._stop()

    async def _stop(self) -> ev.StopReason | None:
        self.cancelling = True
        # Most of the grace: the session cuts the turn off at the whole of it.
        self.cancel_deadline = trio.current_time() + 0.8 * self.server.route.cancel_grace_s
        self.stop_sent = True
        await self._send(Outgoing("chat:stop", chat_client.stop(self.remote_id)))
        if self.follower.paused:
            return ev.StopReason.CANCELLED  # the run already returned: nothing to wait for
        return None

    # -- tasks -------------------------------------------------------------------------
    async def _connect(self, after: int | None) -> None:
        self.gen += 1
        link = Link(self.server, self.gen, self.send, self.remote_id, nursery=self.nursery)
        self.connected_at = trio.current_time()
        await self.nursery.start(link.run, after)
        self.link = link

    async def _watch_cancel(self) -> None:
        await self.turn.wait_cancel_requested()
        await self.send.send(_CancelAsked())

    async def _ask(self, asked: ev.QuestionAsked) -> None:
        # A sub-agent's question keeps its fork as parent, so fronts show it inside the fork.
        answer = await self.turn.ask(asked.question, parent_tool_call_id=asked.parent_tool_call_id)
        await self.send.send(_Answered(asked.question, answer))

    async def finish(self, outcome: ev.StopReason | BackError | None) -> None:
        """Leave the server (None: the turn was cut off): stop a run we no longer follow,
        then close the socket. Shielded and bounded, whatever cancelled us."""
        link = self.link
        if link is None:
            return
        gone = outcome is None or isinstance(outcome, BackError)
        if gone and self.sent_prompt and not self.follower.reader.ended and not self.stop_sent and not self.follower.paused:
            # A deadline, a garbled frame, the session's cut-off: do not leave the run going.
            with trio.move_on_after(1, shield=True):
                await link.emit("chat:stop", chat_client.stop(self.remote_id))
        await link.close()
