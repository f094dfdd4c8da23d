"""One bridge session on an A2A agent, and the turns it runs (the policy half of the A2A back).

`A2ASession.prompt` runs a turn as a loop over exchanges: send a message, read what
the agent says about the task (stream, or poll), and decide by the task's state:

- completed / canceled / rejected → the stop reason (`TaskState` in `specification/a2a.proto` → ACP schema `StopReason`);
- failed → BackError carrying the agent's status message;
- input-required → ask the user through the session (`turn.ask`); an answer goes
  back as the next message on the same task and the loop goes on. If the front
  could not show the question (`by="front"`), or nobody answered in time, the
  question is written into the chat, the task is remembered, and the turn ends
  `input_required`: the user's next prompt continues the task (a2a.proto: an interrupted task resumes with a message on its `taskId`);
- auth-required → `BackAuthRequired` (an ACP auth error); the next prompt, after
  the user signed in, continues the task.

Cancel (A2A spec §3, CancelTask): `cancel()` sends CancelTask once the task id is known, then waits,
within the route's `cancel_grace_s`, for the task to stop; the turn ends
`cancelled` also when the agent says the task cannot be cancelled.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio

from bridge.backs.a2a.http import CALLER, AgentHttp
from bridge.backs.a2a.stream import StreamBroken, stream_events
from bridge.backs.base import SessionContext, TurnHandle
from bridge.codecs import a2a as codec
from bridge.codecs.a2a_card import CardView
from bridge.codecs.a2a_client import A2AError, InvalidResponse, Wire
from bridge.codecs.a2a_tracker import TaskTracker
from bridge.core.content import TextContent, text_of
from bridge.core.events import Event, MessageChunk, StopReason
from bridge.core.identity import ANONYMOUS
from bridge.errors import BackAuthRequired, BackError, BackUnavailable
from bridge.schema import a2a as s

__all__ = ["A2ASession", "CardSource"]

log = logging.getLogger("bridge.backs.a2a.back")


# The agent card and the calls of the interface it chose, read or revalidated when stale
# (`A2ABack.card`).
CardSource = Callable[[], Awaitable[tuple[CardView, Wire]]]


def _new_id() -> str:
    return uuid.uuid4().hex


_IDS_KEPT = 4096  # message ids one session remembers having sent, to never send one twice


class _Interrupted(NamedTuple):
    tracker: TaskTracker
    asked: codec.AskedQuestion | None  # None: auth-required


class _TaskTurn:
    """One turn in flight, following its A2A task: what `cancel()` needs to reach it."""

    def __init__(self, turn: TurnHandle, tracker: TaskTracker) -> None:
        self.turn = turn
        self.tracker = tracker
        self.wire: Wire | None = None  # the calls of the interface this turn talks to
        self.active = True  # False once prompt() returned: nothing more may be emitted
        self.stale: str | None = None  # the question just answered (its state is old news)
        self.task_known = trio.Event()
        self.remote_done = trio.Event()  # terminal, or the agent will not cancel
        self.read_scope: trio.CancelScope | None = None
        self.cancel_sent = False

    def emit(self, events: list[Event]) -> None:
        if not self.active:
            return
        for e in events:
            self.turn.emit(e)
        if self.tracker.task_id is not None and not self.task_known.is_set():
            self.task_known.set()
        if self.tracker.state in s.TERMINAL_STATES:
            self.remote_done.set()

    def on_event(self, event: s.StreamResponse) -> bool:
        self.emit(self.tracker.feed(event))
        return self.tracker.finished(stale=self.stale)

    def stop_reading(self) -> None:
        if self.read_scope is not None:
            self.read_scope.cancel()


class A2ASession:
    """One bridge session on the agent: its contextId, an interrupted task, the turn in flight."""

    def __init__(self, http: AgentHttp, card: CardSource, ctx: SessionContext) -> None:
        self.http = http
        self.card = card
        self.context_id: str | None = ctx.back_ref  # the agent's contextId (A2A `docs/topics/life-of-a-task.md`)
        self.interrupted: _Interrupted | None = None
        self.run: _TaskTurn | None = None
        self._questions = 0
        self._sent_ids: OrderedDict[str, None] = OrderedDict()  # the newest `_IDS_KEPT` ids sent

    def _message_id(self, turn: TurnHandle) -> str:
        """The client's id for its prompt (a proxy keeps the ids it is sent) unless this session
        sent it already (a retry, two clients' same id), else a new one: a2a.proto `Message.message_id` is unique."""
        mid = turn.message_id
        if mid in self._sent_ids:
            log.debug("route %s: message id %r was already sent in this context; a new one is used", self.http.name, mid)
        mid = mid if mid and mid not in self._sent_ids else _new_id()
        self._sent_ids[mid] = None
        if len(self._sent_ids) > _IDS_KEPT:
            self._sent_ids.popitem(last=False)
        return mid

    async def set_option(self, option_id: str, value: str) -> None:
        pass  # A2A has no session options (no counterpart of ACP `session/set_config_option`)

    async def aclose(self) -> None:
        pass  # the HTTP client belongs to the back; running turns were cancelled by the session

    async def cancel(self) -> None:
        run = self.run
        if run is not None:
            CALLER.set(getattr(run.turn, "identity", ANONYMOUS))  # this task's own context: the cancel is the caller's too
            await self._cancel_remote(run)

    # -- a turn ---------------------------------------------------------------------------
    async def prompt(self, turn: TurnHandle) -> StopReason:
        CALLER.set(getattr(turn, "identity", ANONYMOUS))  # every call of this turn, in its task and those it starts
        intr, self.interrupted = self.interrupted, None
        tracker = intr.tracker if intr else TaskTracker()
        run = _TaskTurn(turn, tracker)
        self.run = run  # from here on a cancel reaches this turn
        clean, wire = False, None
        try:
            view, wire = await self.card()
            run.wire = wire
            if turn.cancel_requested:
                self.interrupted = intr  # nothing was sent: an interrupted task stays so
                clean = True
                return StopReason.CANCELLED
            message = self._first_message(turn, intr)
            try:
                stop = await self._turn(run, view, wire, message)
            except A2AError as exc:
                if intr is None or not (exc.is_("TaskNotFound") or exc.is_("UnsupportedOperation")):
                    raise
                # The interrupted task is gone (expired, or finished meanwhile): start afresh.
                log.info("route %s: task %s cannot continue (%s); starting a new task", self.http.name, tracker.task_id, exc)
                run.tracker = tracker = TaskTracker()
                run.task_known, run.stale = trio.Event(), None
                fresh = codec.user_message(turn.prompt, message_id=self._message_id(turn), context_id=self.context_id, client=turn.message_meta)
                stop = await self._turn(run, view, wire, fresh)
            clean = True
            return stop
        except A2AError as exc:
            clean = True
            raise self.http.error(f"the A2A agent answered with an error: {exc}") from exc
        except InvalidResponse as exc:
            raise self.http.error(f"the A2A agent sent {exc}") from exc
        finally:
            run.active = False
            self.run = None
            task_id = tracker.task_id
            abandoned = not clean and task_id and tracker.state not in s.TERMINAL_STATES
            if abandoned and wire is not None and not run.cancel_sent and self.interrupted is None:
                # Cut off (turn timeout, a failure we could not resume): do not leave the task running.
                with trio.move_on_after(self.http.cfg.connect_timeout_s, shield=True):
                    await self._send_cancel(wire, task_id)  # type: ignore[arg-type]

    def _first_message(self, turn: TurnHandle, intr: _Interrupted | None) -> s.Message:
        if intr is None:
            # The first message of a session carries no contextId; later ones carry it (A2A `docs/topics/life-of-a-task.md`).
            return codec.user_message(turn.prompt, message_id=self._message_id(turn), context_id=self.context_id, client=turn.message_meta)
        task_id = intr.tracker.task_id
        status = intr.tracker.status
        stale = status.message.message_id if status and status.message else None
        asked = intr.asked
        if asked is not None and asked.shape != "text":
            answer = codec.answer_from_text(asked, text_of(turn.prompt))
            if answer.selected:
                return codec.user_message(
                    [],
                    message_id=self._message_id(turn),
                    context_id=self.context_id,
                    task_id=task_id,
                    in_reply_to=asked.message_id or None,
                    extra_parts=codec.answer_parts(asked, answer),
                )
        return codec.user_message(
            turn.prompt, message_id=self._message_id(turn), context_id=self.context_id, task_id=task_id, in_reply_to=stale,
            client=turn.message_meta,
        )  # fmt: skip

    async def _turn(self, run: _TaskTurn, view: CardView, wire: Wire, message: s.Message) -> StopReason:
        http, turn = self.http, run.turn
        if message.task_id:
            # Continuing an interrupted task: until the agent moves on, its state still
            # shows the question this message answers.
            ours = (message.metadata or {}).get(codec.META_KEY)
            run.stale = ours.get("inReplyTo") if isinstance(ours, dict) else None
        while True:
            await self._exchange(run, view, wire, message)
            tracker = run.tracker
            turn.trace.note(remote_task=tracker.task_id, remote_context=tracker.context_id)
            if tracker.context_id and tracker.context_id != self.context_id:
                self.context_id = tracker.context_id
                turn.set_back_ref(tracker.context_id)
            if turn.cancel_requested:
                return await self._cancelled(run)
            if tracker.reply is not None:
                return StopReason.END_TURN  # a bare Message ends the turn (A2A spec §3, SendMessage)
            state, status = tracker.state, tracker.status
            if tracker.task_id is None or status is None:
                raise http.error("the A2A agent's answer names no task and is not a message")
            stop = codec.stop_reason(state or "")
            if stop is not None:
                return stop
            if state == s.TaskState.FAILED:
                why = codec.message_text(status.message) or "no reason given"
                raise http.error(f"the A2A agent reported that task {tracker.task_id} failed: {why}")
            if state == s.TaskState.AUTH_REQUIRED:
                self.interrupted = _Interrupted(tracker, None)
                text = codec.message_text(status.message)
                url = codec.auth_url(status)
                where = f" at {url}" if url and url not in text else ""
                raise BackAuthRequired(
                    f"route {http.name}: the A2A agent needs you to authorize{where}"
                    f"{': ' + text if text else ''}; your next prompt continues task {tracker.task_id}",
                    data={"url": url} if url else None,
                )
            if state != s.TaskState.INPUT_REQUIRED:
                raise http.error(f"the A2A agent left task {tracker.task_id} in state {state} and stopped talking")
            self._questions += 1
            asked = codec.question_for(status, tracker.task_id, seq=self._questions)
            answer = await turn.ask(asked.question)
            if turn.cancel_requested:
                return await self._cancelled(run)
            if answer.cancelled and answer.by in ("front", "timeout"):
                # Nobody could answer in the front: the question goes into the chat and
                # the user's next prompt answers it, on this same task (the last resort of bridge/codecs/a2a.py `question_text`).
                run.emit([MessageChunk(content=TextContent(text=codec.question_text(asked)), message_id=asked.message_id or None)])
                self.interrupted = _Interrupted(tracker, asked)
                return StopReason.INPUT_REQUIRED
            if answer.cancelled:
                # The user dismissed the question: stop the task (it cannot go on without an answer).
                await self._cancel_remote(run)
                return StopReason.CANCELLED
            message = codec.user_message(
                [],
                message_id=_new_id(),
                context_id=self.context_id,
                task_id=tracker.task_id,
                in_reply_to=asked.message_id or None,
                extra_parts=codec.answer_parts(asked, answer),
            )
            run.stale = asked.message_id or None

    async def _exchange(self, run: _TaskTurn, view: CardView, wire: Wire, message: s.Message) -> None:
        """Send one message and follow the task until it stops, is interrupted, or a cancel cuts in."""
        http, cfg = self.http, self.http.cfg
        if view.streaming:
            call = wire.send(message, stream=True)
            call = call._replace(headers={**call.headers, **run.turn.trace.carrier()})  # W3C traceparent
            try:
                with trio.CancelScope() as run.read_scope:
                    if await stream_events(
                        http, call, run.on_event, first_s=cfg.first_event_timeout_s, idle_s=cfg.idle_timeout_s, flow=run.turn.flow
                    ):
                        return
                if run.read_scope.cancelled_caught:
                    return
                reason = "the event stream ended before the task finished"
            except StreamBroken as exc:
                if run.tracker.task_id is None:
                    raise exc.error from exc  # nothing to resume: say what failed
                reason = exc.reason
            await self._resume(run, view, wire, reason)
            return
        call = wire.send(message, stream=False, return_immediately=cfg.return_immediately)
        call = call._replace(headers={**call.headers, **run.turn.trace.carrier()})
        with trio.CancelScope() as run.read_scope:
            timeout = cfg.first_event_timeout_s if cfg.return_immediately else cfg.idle_timeout_s
            result = wire.decode_send(await http.request(call, timeout_s=timeout))
            if isinstance(result, s.Task):
                run.emit(run.tracker.feed_task(result))
            else:
                run.emit(run.tracker.feed_message(result))
            if not run.tracker.finished(stale=run.stale):
                await self._poll(run, wire)

    async def _resume(self, run: _TaskTurn, view: CardView, wire: Wire, reason: str) -> None:
        """Re-attach to the task (SubscribeToTask), backing off, or poll GetTask (A2A spec §3, SubscribeToTask)."""
        http, cfg, tracker = self.http, self.http.cfg, run.tracker
        task_id = tracker.task_id
        assert task_id is not None
        attempt = 0
        while not tracker.finished(stale=run.stale) and not run.turn.cancel_requested:
            attempt += 1
            if attempt > cfg.resume_attempts:
                raise http.error(
                    f"the event stream of task {task_id} broke and could not be resumed "
                    f"after {cfg.resume_attempts} attempts: {reason}",
                    unavailable=True,
                )
            log.info("route %s: %s; re-attaching to task %s (attempt %d)", http.name, reason, task_id, attempt)
            await trio.sleep(min(0.05 * 2**attempt, 2.0))
            try:
                with trio.CancelScope() as run.read_scope:
                    if http.no_subscribe:
                        await self._poll(run, wire)
                        return
                    if await stream_events(
                        http,
                        wire.subscribe(task_id),
                        run.on_event,
                        first_s=cfg.first_event_timeout_s,
                        idle_s=cfg.idle_timeout_s,
                        flow=run.turn.flow,
                    ):
                        return
                if run.read_scope.cancelled_caught:
                    return
                reason = "the re-attached stream ended before the task finished"
            except StreamBroken as exc:
                reason = exc.reason
            except BackUnavailable as exc:
                reason = exc.message
            except A2AError as exc:
                if exc.is_("UnsupportedOperation") or exc.is_("MethodNotFound") or exc.status in (404, 405):
                    # Subscribing is not offered, or the task already ended: read it instead.
                    http.no_subscribe = exc.is_("MethodNotFound") or exc.status in (404, 405)
                    with trio.CancelScope() as run.read_scope:
                        await self._poll(run, wire, at_once=True)
                    return
                raise

    async def _poll(self, run: _TaskTurn, wire: Wire, *, at_once: bool = False) -> None:
        http, cfg, tracker = self.http, self.http.cfg, run.tracker
        task_id = tracker.task_id
        assert task_id is not None
        interval, failures = (0.0 if at_once else 0.05), 0
        while not tracker.finished(stale=run.stale):
            await trio.sleep(interval)
            interval = min(max(interval, 0.05) * 2, cfg.poll_interval_s)
            try:
                body = await http.request(wire.get_task(task_id), timeout_s=cfg.first_event_timeout_s)
            except BackUnavailable as exc:
                failures += 1
                if failures > cfg.resume_attempts:
                    raise
                log.info("route %s: polling task %s failed (%s); trying again", http.name, task_id, exc.message)
                continue
            failures = 0
            run.emit(tracker.feed_task(wire.decode_task(body)))
            await run.turn.flow()

    # -- cancel ------------------------------------------------------------------------------
    async def _cancelled(self, run: _TaskTurn) -> StopReason:
        """The session asked the turn to stop: make sure CancelTask went out (the
        session's `cancel()` usually sent it already), then wait, within the bound,
        for the agent to stop."""
        await self._cancel_remote(run)
        with trio.move_on_after(self.http.route.cancel_grace_s):
            await run.remote_done.wait()
        return StopReason.CANCELLED

    async def _cancel_remote(self, run: _TaskTurn) -> None:
        if run.cancel_sent:
            return
        run.cancel_sent = True
        http, wire = self.http, run.wire
        grace = http.route.cancel_grace_s
        with trio.move_on_after(grace):
            await run.task_known.wait()
        task_id = run.tracker.task_id
        if task_id is None or wire is None or run.tracker.state in s.TERMINAL_STATES:
            run.remote_done.set()
            run.stop_reading()
            return
        with trio.move_on_after(grace):
            task = await self._send_cancel(wire, task_id)
            if task is not None:
                run.emit(run.tracker.feed_task(task))
            if task is None or task.status.state in s.TERMINAL_STATES:
                run.remote_done.set()
            # The agent accepted but has not stopped yet: its stream says when it does.
            await run.remote_done.wait()
        run.stop_reading()

    async def _send_cancel(self, wire: Wire, task_id: str) -> s.Task | None:
        """CancelTask; the task it returns, or None when the agent would not (logged)."""
        http = self.http
        try:
            return wire.decode_task(await http.request(wire.cancel(task_id), timeout_s=http.route.cancel_grace_s))
        except A2AError as exc:
            # TaskNotCancelable and friends: the turn still ends `cancelled` (as ACP `session/cancel` requires).
            log.info("route %s: the agent did not cancel task %s: %s", http.name, task_id, exc)
        except (BackError, InvalidResponse) as exc:
            log.warning("route %s: cancelling task %s failed: %s", http.name, task_id, getattr(exc, "message", exc))
        return None
