"""A2A tasks and contexts over bridge sessions: where the A2A front meets `bridge.session`.

Identity (A2A spec, docs/topics/life-of-a-task.md: contexts and tasks): a context is a bridge session (`contextId` is
its id); a task is a turn (`taskId` is the turn id). A message without `contextId`
opens a new session; an unknown `contextId` is refused as TaskNotFound (the
bridge mints context ids, and an unknown session is an unknown task in
bridge/errors.py). A message with the `taskId` of an interrupted task continues it:
the answer to its open question, or, when its turn ended interrupted
(input_required, auth), a new turn of the same task. A message to a terminal task
is UnsupportedOperationError: follow-ups are new tasks in the same context and may
name `referenceTaskIds`, whose replies are quoted to the agent when it runs
elsewhere.

Parallel tasks in one context: a session runs one turn at a time, so a new task
runs in the context's first idle session (keeping that session's conversation with
the back); when all are busy, or held by an interrupted task waiting for its next
message, a new session is opened beside them ("side" session, linked to the
context): it runs in parallel, without the back's memory of the others.

Kept as each session's typed `A2AContext` (bridge/fronts/a2a/state.py says what it
holds), which the session writes with its record at every turn end, so a task's final
state is stored with it. GetTask, ListTasks and SubscribeToTask read live tasks, then a small cache, then
the store (bridge/fronts/a2a/read.py), so they work after the turn ended and after
a restart.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

import trio

from bridge.codecs.a2a_server import A2AFault
from bridge.codecs.a2a_answer import answer_for, blocks_of_message
from bridge.codecs.a2a_task import TaskProjector
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.core.content import ContentBlock, TextContent
from bridge.core.events import TurnStarted
from bridge.errors import BridgeError, Busy, InvalidParams, NotFound
from bridge.fronts.a2a.read import list_tasks, replay
from bridge.fronts.a2a.state import A2AContext
from bridge.fronts.a2a.stream import LiveTask, SseStream
from bridge.fronts.a2a.waiting import WaitingStreams
from bridge.schema import a2a as s
from bridge.session import Session, SessionManager

__all__ = ["TaskService"]

log = logging.getLogger("bridge.fronts.a2a.front")

_RECENT = 1024  # finished tasks kept projected in memory
_REFERENCE_CHARS = 16 * 1024
_S = s.TaskState


class TaskService:
    def __init__(self, cfg: A2AFrontConfig, manager: SessionManager) -> None:
        self.cfg = cfg
        self.manager = manager
        self.live: dict[str, LiveTask] = {}
        self.waiting = WaitingStreams(cfg, manager)  # SubscribeToTask streams of interrupted tasks between turns
        self._recent: OrderedDict[str, tuple[str, str, TaskProjector]] = OrderedDict()  # task → (route, session id, projector)
        # Our sessions with nothing running, longest idle first → since when.
        self._idle: OrderedDict[str, float] = OrderedDict()
        self._reap_now = trio.Event()
        self._reaper_running = False
        self.push: Any = None  # the PushService (a2a_push.py), set by the front
        manager.keep_alive.append(_holds_a_task)  # the daemon's idle reaper leaves those to ours

    # -- sending -------------------------------------------------------------------------------
    async def send(self, route: str, req: s.SendMessageRequest, *, dialect: str = "1.0") -> LiveTask:
        """Start a task, or continue the interrupted one the message names; returns it running."""
        msg = req.message
        if not msg.parts:
            raise InvalidParams("message.parts must hold at least one part")
        if not msg.message_id:
            raise InvalidParams("message.messageId is required")
        if msg.role not in (s.ROLE_USER, "ROLE_UNSPECIFIED"):
            raise InvalidParams(f"message.role must be ROLE_USER, not {msg.role}")
        config = req.configuration
        if config is not None and config.accepted_output_modes and not _accepts(config.accepted_output_modes):
            modes = config.accepted_output_modes
            raise A2AFault("ContentTypeNotSupported", f"this agent answers in text/plain or application/json, not {modes}")
        push = config.task_push_notification_config if config is not None else None
        if push is not None:
            if self.push is None:
                raise A2AFault("PushNotificationNotSupported", "this agent sends no push notifications")
            self.push.check(push)  # before the task exists: a bad webhook fails the call, not the task
        if msg.task_id:
            live = await self._continue(route, msg, push, dialect)
        else:
            live = await self._new_task(route, msg, push, dialect)
        if push is not None:
            await live.session.save_record()  # the config is kept with the task
        return live

    async def _new_task(self, route: str, msg: s.Message, push: s.TaskPushNotificationConfig | None, dialect: str) -> LiveTask:
        content = blocks_of_message(msg)
        if msg.context_id:
            session = await self._session_for(route, msg.context_id)
            context_id = msg.context_id
        else:
            session = await self.manager.create(route, lazy=True)
            session.front_state(A2AContext)  # marks it as the A2A front's, stored with it
            context_id = session.id
        refs = list(msg.reference_task_ids or ())
        quoted = await self._quote_references(route, context_id, session.id, refs) if refs else []
        content = quoted + content
        mid, meta = msg.message_id, _client_meta(msg)
        try:
            turn = session.start_turn(content, message_id=mid, meta=meta)
        except Busy:  # taken meanwhile by another request of the same context
            session = await self._side_session(route, context_id)
            turn = session.start_turn(content, message_id=mid, meta=meta)
        except BridgeError:
            self._went_idle(session)  # refused before any turn (a bad /command, shutting down)
            raise
        state = session.front_state(A2AContext)
        task = state.task(turn.turn_id)
        task.mids = {turn.turn_id: msg.message_id}
        state.keep_sent(turn.turn_id, turn.turn_id, msg)
        task.refs = refs
        task.quoted = len(quoted)
        projector = TaskProjector(turn.turn_id, context_id, message_ids=task.mids, refs=refs or None, quoted=len(quoted), sent=task.sent)
        self._with_push(session, turn.turn_id, push, dialect)
        return self._run(session, projector, turn, content)

    def _with_push(self, session: Session, task_id: str, push: s.TaskPushNotificationConfig | None, dialect: str) -> None:
        """A webhook given with the message hears of every state change from the first."""
        if push is not None:
            push.task_id = task_id
            self.push.register(session, push, dialect=dialect)

    def _run(self, session: Session, projector: TaskProjector, turn: Any, content: list[ContentBlock]) -> LiveTask:
        live = LiveTask(session, projector, turn, on_state=self._state_changed, on_end=self._ended)
        live.handoff = lambda stream: self.waiting.add(projector, stream, session)
        for stream in self.waiting.take(projector.task_id):
            live.follow(stream)
        self.live[projector.task_id] = live
        self._idle.pop(session.id, None)
        live.start(turn_started=TurnStarted(turn_id=turn.turn_id, prompt=content, message_id=turn.message_id, meta=turn.message_meta))
        return live

    async def _continue(self, route: str, msg: s.Message, push: s.TaskPushNotificationConfig | None, dialect: str) -> LiveTask:
        task_id = msg.task_id
        assert task_id is not None
        live = self.live.get(task_id)
        if live is not None:
            self._check(route, live.session.record.route, live.projector.context_id, msg.context_id, task_id)
            question = live.projector.open_question
            if live.projector.state != _S.INPUT_REQUIRED or question is None:
                why = f"task {task_id} is {live.projector.state}, not waiting for input: wait for it, subscribe to it or cancel it"
                raise A2AFault("UnsupportedOperation", why)
            try:
                selected, text, values = answer_for(question, msg.parts)
            except ValueError as exc:
                raise InvalidParams(str(exc)) from exc
            live.projector.message_ids[question.id] = msg.message_id
            _keep_sent(live.session, live.projector, question.id, msg)
            self._with_push(live.session, task_id, push, dialect)
            live.session.answer(question.id, selected=selected, text=text, values=values)
            return live
        session_id, projector = await self._load(route, task_id)
        self._check(route, route, projector.context_id, msg.context_id, task_id)
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}, and a finished task takes no more messages: "
                           "send a new message in its context (referenceTaskIds may name it)")  # fmt: skip
        if projector.state not in s.INTERRUPTED_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}, not waiting for input")
        session = await self.manager.get(session_id)
        content = blocks_of_message(msg)
        turn = session.start_turn(content, message_id=msg.message_id, meta=_client_meta(msg))
        state = session.front_state(A2AContext)
        task = state.task(task_id)
        task.turns.append(turn.turn_id)
        if not task.mids:
            task.mids = projector.message_ids
        task.mids[turn.turn_id] = msg.message_id
        projector.message_ids[turn.turn_id] = msg.message_id
        _keep_sent(session, projector, turn.turn_id, msg)
        state.cont[turn.turn_id] = task_id
        if state.held == task_id:
            state.held = None
        self._recent.pop(task_id, None)
        self._with_push(session, task_id, push, dialect)
        live = self._run(session, projector, turn, content)
        await session.save_record()  # the continuation is findable after a crash
        return live

    async def subscribe_waiting(self, route: str, task_id: str, stream: SseStream) -> None:
        """SubscribeToTask on a task that is not running: the task as it is, then, if it is
        interrupted, its next turn (A2A spec §3, SubscribeToTask: open until a terminal state)."""
        session_id, projector = await self._load(route, task_id)
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}: a finished task has no stream; GetTask reads it")
        self.waiting.check(task_id)
        stream.put(stream.encoder.frame(stream.encoder.payload(s.StreamResponse(task=projector.snapshot()))))
        self.waiting.add(projector, stream, self.manager.live(session_id))

    @staticmethod
    def _check(route: str, task_route: str, context_id: str, asked: str | None, task_id: str) -> None:
        if task_route != route:
            raise NotFound(f"unknown task {task_id!r}")
        if asked and asked != context_id:
            raise InvalidParams(f"task {task_id} belongs to context {context_id}, not {asked}")

    # -- contexts --------------------------------------------------------------------------------
    async def _primary(self, route: str, context_id: str) -> Session:
        try:
            session = await self.manager.get(context_id)
        except NotFound:
            raise NotFound(f"unknown contextId {context_id!r}: omit contextId to start a new conversation") from None
        state = session.find_front_state(A2AContext)
        if session.record.route != route or state is None or state.ctx:
            raise NotFound(f"unknown contextId {context_id!r} on this agent")
        return session

    async def _session_for(self, route: str, context_id: str) -> Session:
        """The context's first idle session that no interrupted task holds, else a new side session."""
        primary = await self._primary(route, context_id)
        for sid in [context_id, *primary.front_state(A2AContext).side]:
            try:
                session = primary if sid == context_id else (self.manager.live(sid) or await self.manager.get(sid))
            except NotFound:
                continue  # a side session deleted since
            if not session.busy and not session.front_state(A2AContext).held and not session.retired:
                return session
        return await self._side_session(route, context_id, primary=primary)

    async def _side_session(self, route: str, context_id: str, *, primary: Session | None = None) -> Session:
        primary = primary or await self._primary(route, context_id)
        session = await self.manager.create(route, lazy=True)
        session.front_state(A2AContext).ctx = context_id
        primary.front_state(A2AContext).side.append(session.id)
        await primary.save_record()
        return session

    async def _quote_references(self, route: str, context_id: str, session_id: str, refs: list[str]) -> list[ContentBlock]:
        """Referenced tasks' replies, for an agent that did not see them (another session)."""
        blocks: list[ContentBlock] = []
        for ref in refs:
            ref_session, projector = await self._load(route, ref)
            if projector.context_id != context_id:
                raise InvalidParams(f"referenceTaskIds: task {ref} belongs to another context")
            if ref_session == session_id:
                continue  # this session's agent saw it
            texts = [p.text for a in projector.snapshot(history_length=0).artifacts or () for p in a.parts if p.text]
            if texts:
                body = "".join(texts)[:_REFERENCE_CHARS]
                blocks.append(TextContent(text=f"[Earlier task {ref} answered:]\n{body}\n[End of task {ref}]\n\n"))
        return blocks

    # -- task lifecycle --------------------------------------------------------------------------
    def _state_changed(self, live: LiveTask, event: s.StreamResponse) -> None:
        if self.push is not None:
            self.push.notify(live.session, live.projector, event)

    def _ended(self, live: LiveTask) -> None:
        """The turn ended: the task's state goes into the session record the session writes next."""
        p = live.projector
        state = live.session.front_state(A2AContext)
        task = state.task(p.task_id)
        task.state, task.ts = p.state, p.timestamp
        if p.state in s.INTERRUPTED_STATES:
            state.held = p.task_id
        elif state.held == p.task_id:
            state.held = None
        if self.live.get(p.task_id) is live:
            del self.live[p.task_id]
        self._remember(p.task_id, live.session.record.route, live.session.id, p)
        self._went_idle(live.session)

    def _went_idle(self, session: Session) -> None:
        self._idle[session.id] = time.monotonic()
        self._idle.move_to_end(session.id)
        if len(self._idle) > self.cfg.max_idle_sessions:
            self._reap_now.set()
        if not self._reaper_running:
            self._reaper_running = True
            session.shared_nursery.start_soon(self._reaper)

    def _remember(self, task_id: str, route: str, session_id: str, projector: TaskProjector) -> None:
        self._recent[task_id] = (route, session_id, projector)
        self._recent.move_to_end(task_id)
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)

    async def _reaper(self) -> None:
        """Close our sessions idle for `idle_close_s`, or past `max_idle_sessions` (the
        longest idle first); never one that runs a turn or that an interrupted task holds."""
        try:
            while self._idle:
                with trio.move_on_after(max(1.0, self.cfg.idle_close_s / 4)):
                    await self._reap_now.wait()
                self._reap_now = trio.Event()
                now = time.monotonic()
                while self._idle:
                    sid, since = next(iter(self._idle.items()))
                    if now - since < self.cfg.idle_close_s and len(self._idle) <= self.cfg.max_idle_sessions:
                        break
                    del self._idle[sid]
                    session = self.manager.live(sid)
                    if session is None or session.front_state(A2AContext).held:
                        continue
                    if not session.busy:
                        await session.close()
        finally:
            self._reaper_running = False

    # -- reading -------------------------------------------------------------------------------
    async def task(self, route: str, task_id: str) -> TaskProjector:
        live = self.live.get(task_id)
        if live is not None:
            if live.session.record.route != route:
                raise NotFound(f"unknown task {task_id!r}")
            return live.projector
        return (await self._load(route, task_id))[1]

    async def _load(self, route: str, task_id: str) -> tuple[str, TaskProjector]:
        """(session id, projector) of a task that is not running: from the cache or the store."""
        live = self.live.get(task_id)
        if live is not None:
            return live.session.id, live.projector
        cached = self._recent.get(task_id)
        if cached is not None:
            if cached[0] != route:
                raise NotFound(f"unknown task {task_id!r}")
            self._recent.move_to_end(task_id)
            return cached[1], cached[2]
        session_id, projector = await replay(self.manager, route, task_id)
        self._remember(task_id, route, session_id, projector)
        return session_id, projector

    # -- cancel ------------------------------------------------------------------------------------
    async def cancel(self, route: str, task_id: str) -> TaskProjector:
        live = self.live.get(task_id)
        if live is not None and live.session.record.route == route:
            live.session.cancel()
            with trio.move_on_after(live.session.route.cancel_grace_s + 2):
                await live.wait_ended()
            return live.projector
        session_id, projector = await self._load(route, task_id)
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("TaskNotCancelable", f"task {task_id} is already {projector.state}")
        # Interrupted, its turn over: nothing runs; the task just ends canceled.
        event = projector.feed_canceled(time.time())
        session = await self.manager.get(session_id)
        state = session.front_state(A2AContext)
        task = state.task(task_id)
        task.state, task.ts = projector.state, projector.timestamp
        if state.held == task_id:
            state.held = None
        await session.save_record()
        self._went_idle(session)
        if self.push is not None:
            self.push.notify(session, projector, event)
        self.waiting.end(task_id, event)
        return projector

    # -- listing ---------------------------------------------------------------------------------
    async def list(self, route: str, req: s.ListTasksRequest) -> s.ListTasksResponse:
        return await list_tasks(self, route, req)


def _holds_a_task(session: Session) -> bool:
    """An interrupted task waits in this session for the client's next message."""
    state = session.find_front_state(A2AContext)
    return state is not None and bool(state.held)


def _keep_sent(session: Session, projector: TaskProjector, key: str, msg: s.Message) -> None:
    """The client's message as sent, for the task's history: stored with the session and
    known to the projector (which may hold a copy read back from the store)."""
    if session.front_state(A2AContext).keep_sent(projector.task_id, key, msg):
        projector.sent[key] = msg


def _client_meta(msg: s.Message) -> dict[str, Any] | None:
    """The client's own `metadata` and `extensions` of its message (a2a.proto `Message`), as
    `TurnStarted.meta`: a back that speaks A2A sends them on (bridge/codecs/a2a.py `user_message`)."""
    meta = {k: v for k, v in (("metadata", msg.metadata), ("extensions", msg.extensions)) if v}
    return meta or None


def _accepts(modes: list[str]) -> bool:
    return any(m.split(";")[0].strip() in ("text/plain", "text/*", "*/*", "application/json", "*") for m in modes)
