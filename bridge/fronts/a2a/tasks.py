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

Each task is a row of its own, staged with its session's next flush when it is made,
at each change of its state (its end is written with the turn's end, in one
transaction), and written at once when a push config changes, a continuation starts
or an interrupted task is canceled; each session keeps a small `A2AContext`
(bridge/fronts/a2a/state.py says what each holds). Tasks are held in memory while
they run and in a bounded cache of recent ones; GetTask, ListTasks, SubscribeToTask and
push configs read any other from the store (bridge/fronts/a2a/read.py), so they work
after the turn ended and after a restart.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

import trio

from bridge.codecs.a2a_server import A2AFault
from bridge.core.access import OWNER_META
from bridge.codecs.a2a_answer import answer_for, blocks_of_message
from bridge.codecs.a2a_task import TaskProjector
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.core.content import ContentBlock, TextContent
from bridge.core.events import TurnStarted
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import BridgeError, Busy, InvalidParams, NotFound
from bridge.fronts.a2a.read import list_tasks, replay
from bridge.fronts.a2a.remote import RowForwarder, follow
from bridge.fronts.a2a.state import A2AContext, A2ATask, Kept
from bridge.fronts.a2a.stream import LiveTask, SseStream
from bridge.fronts.a2a.waiting import WaitingStreams
from bridge.schema import a2a as s
from bridge.session import Session, SessionManager
from bridge.store import SessionRecord, TaskRecord
from bridge.store.listing import Visible

__all__ = ["TaskService"]

log = logging.getLogger("bridge.fronts.a2a.front")

_RECENT = 1024  # tasks not running kept in memory (projected), the most recently used
_REFERENCE_CHARS = 16 * 1024
_S = s.TaskState


class TaskService:
    def __init__(self, cfg: A2AFrontConfig, manager: SessionManager) -> None:
        self.cfg = cfg
        self.manager = manager
        self.live: dict[str, LiveTask] = {}
        self.waiting = WaitingStreams(cfg, manager)  # SubscribeToTask streams of interrupted tasks between turns
        self._recent: OrderedDict[str, Kept] = OrderedDict()  # tasks not running, least recently used first
        # Our sessions with nothing running, longest idle first → since when.
        self._idle: OrderedDict[str, float] = OrderedDict()
        self._reap_now = trio.Event()
        self._reaper_running = False
        self.push: Any = None  # the PushService (a2a_push.py), set by the front
        self.rows = RowForwarder(manager)  # what we stage in sessions other instances run
        manager.keep_alive.append(_holds_a_task)  # the daemon's idle reaper leaves those to ours

    # -- sending -------------------------------------------------------------------------------
    async def send(
        self, route: str, req: s.SendMessageRequest, *, dialect: str = "1.0", owner: dict[str, Any] | None = None,
        identity: Identity = ANONYMOUS,
    ) -> LiveTask:
        """Start a task, or continue the interrupted one the message names; returns it running.
        `owner`: a new context's meta naming who owns it (bridge/fronts/owners.py);
        `identity`: who sends it (its turn carries it; `[limits]` count it)."""
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
            live = await self._continue(route, msg, push, dialect, identity)
        else:
            live = await self._new_task(route, msg, push, dialect, identity, owner)
        if push is not None:
            live.session.stage_task(live.kept.row())
            await live.session.save_record()  # the config is kept with the task
        return live

    async def publish(self, live: LiveTask) -> None:
        """In a cluster, a task answered before its turn ended (returnImmediately, a
        stream's first event, a question) is stored first, so every instance finds it;
        an ended one was stored with its end."""
        if not self.manager.cluster.solo and not live.ended:
            live.session.stage_task(live.kept.row())
            await live.session.save_record()

    async def _new_task(
        self, route: str, msg: s.Message, push: s.TaskPushNotificationConfig | None, dialect: str, identity: Identity,
        owner: dict[str, Any] | None = None,
    ) -> LiveTask:
        content = blocks_of_message(msg)
        if msg.context_id:
            session = await self._session_for(route, msg.context_id)
            context_id = msg.context_id
        else:
            session = await self.manager.create(route, front="a2a", lazy=True, meta=owner)
            session.front_state(A2AContext)  # marks it as the A2A front's, stored with it
            context_id = session.id
        refs = list(msg.reference_task_ids or ())
        quoted = await self._quote_references(route, context_id, session.id, refs) if refs else []
        content = quoted + content
        mid, meta = msg.message_id, _client_meta(msg)
        try:
            turn = await session.begin_turn(content, message_id=mid, meta=meta, identity=identity, front="a2a")
        except Busy:  # taken meanwhile by another request of the same context
            session = await self._side_session(route, context_id)
            turn = await session.begin_turn(content, message_id=mid, meta=meta, identity=identity, front="a2a")
        except BridgeError:
            self._went_idle(session)  # refused before any turn (a bad /command, shutting down)
            raise
        task = A2ATask(mids={turn.turn_id: msg.message_id}, refs=refs, quoted=len(quoted))
        record = TaskRecord(
            task_id=turn.turn_id, session_id=session.id, route=route, context_id=context_id, created_at=turn.started_at,
            turn_id=turn.turn_id, state=_S.SUBMITTED, status_ts=turn.started_at,
        )  # fmt: skip
        projector = TaskProjector(turn.turn_id, context_id, message_ids=task.mids, refs=refs or None, quoted=len(quoted), sent=task.sent)
        kept = Kept(record, task, projector)
        kept.keep_sent(turn.turn_id, msg)
        self._with_push(kept, push, dialect, identity)
        return self._run(session, kept, turn, content)  # its TurnStarted makes it WORKING: its row is staged then

    def _with_push(self, kept: Kept, push: s.TaskPushNotificationConfig | None, dialect: str, identity: Identity) -> None:
        """A webhook given with the message hears of every state change from the first."""
        if push is not None:
            push.task_id = kept.task_id
            self.push.register(kept, push, dialect=dialect, creator=identity)

    def _run(self, session: Session, kept: Kept, turn: Any, content: list[ContentBlock]) -> LiveTask:
        live = LiveTask(session, kept, turn, on_state=self._state_changed, on_end=self._ended)
        live.handoff = lambda stream: self.waiting.add(kept.projector, stream, session)
        for stream in self.waiting.take(kept.task_id):
            live.follow(stream)
        self.live[kept.task_id] = live
        self._idle.pop(session.id, None)
        live.start(turn_started=TurnStarted(turn_id=turn.turn_id, prompt=content, message_id=turn.message_id, meta=turn.message_meta))
        return live

    async def _continue(
        self, route: str, msg: s.Message, push: s.TaskPushNotificationConfig | None, dialect: str, identity: Identity
    ) -> LiveTask:
        task_id = msg.task_id
        assert task_id is not None
        live = self.live.get(task_id) or await follow(self, route, task_id)
        if live is not None:
            self._check(route, live.kept.record.route, live.projector.context_id, msg.context_id, task_id)
            question = live.projector.open_question
            if live.projector.state != _S.INPUT_REQUIRED or question is None:
                why = f"task {task_id} is {live.projector.state}, not waiting for input: wait for it, subscribe to it or cancel it"
                raise A2AFault("UnsupportedOperation", why)
            try:
                selected, text, values = answer_for(question, msg.parts)
            except ValueError as exc:
                raise InvalidParams(str(exc)) from exc
            live.kept.task.mids[question.id] = msg.message_id  # its row is staged as it turns WORKING
            live.kept.keep_sent(question.id, msg)
            self._with_push(live.kept, push, dialect, identity)
            await live.session.send_answer(question.id, selected=selected, text=text, values=values)
            await live.wait_answered(question.id)  # the task is WORKING again as SendMessage returns
            return live
        kept = await self.kept(route, task_id)
        projector = kept.projector
        self._check(route, route, projector.context_id, msg.context_id, task_id)
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}, and a finished task takes no more messages: "
                           "send a new message in its context (referenceTaskIds may name it)")  # fmt: skip
        if projector.state not in s.INTERRUPTED_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}, not waiting for input")
        session = await self.manager.get(kept.record.session_id)
        content = blocks_of_message(msg)
        turn = await session.begin_turn(content, message_id=msg.message_id, meta=_client_meta(msg), identity=identity, front="a2a")
        kept.task.turns.append(turn.turn_id)  # a continuation turn has no row: its id is no task
        kept.task.mids[turn.turn_id] = msg.message_id
        kept.keep_sent(turn.turn_id, msg)
        kept.record.turn_id = turn.turn_id
        state = session.front_state(A2AContext)
        if state.held == task_id:
            state.held = None
        self._recent.pop(task_id, None)
        self._with_push(kept, push, dialect, identity)
        live = self._run(session, kept, turn, content)
        session.stage_task(kept.row())
        await session.save_record()  # the continuation is findable after a crash
        return live

    async def subscribe_waiting(self, route: str, task_id: str, stream: SseStream) -> SessionRecord:
        """SubscribeToTask on a task that is not running: the task as it is, then, if it is
        interrupted, its next turn (A2A spec §3, SubscribeToTask: open until a terminal state).
        Returns the record of the task's context (whose rules a reload rechecks)."""
        kept = await self.kept(route, task_id)
        projector = kept.projector
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("UnsupportedOperation", f"task {task_id} is {projector.state}: a finished task has no stream; GetTask reads it")
        self.waiting.check(task_id)
        session = self.manager.live(kept.record.session_id)
        record = session.record if session is not None else await self.manager.store.get_session(kept.record.session_id)
        if record is None:  # its context was deleted as we read the task
            raise NotFound(f"unknown task {task_id!r}")
        stream.put(stream.encoder.frame(stream.encoder.payload(s.StreamResponse(task=projector.snapshot()))))
        self.waiting.add(projector, stream, session)
        return record

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
            # Said as for an id nobody has: a context of another route is not confirmed.
            raise NotFound(f"unknown contextId {context_id!r}: omit contextId to start a new conversation")
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
        owner = {OWNER_META: primary.record.meta[OWNER_META]} if OWNER_META in primary.record.meta else None
        session = await self.manager.create(route, front="a2a", lazy=True, meta=owner)  # the context's owner owns it too
        session.front_state(A2AContext).ctx = context_id
        primary.front_state(A2AContext).side.append(session.id)
        await primary.save_record()
        return session

    async def _quote_references(self, route: str, context_id: str, session_id: str, refs: list[str]) -> list[ContentBlock]:
        """Referenced tasks' replies, for an agent that did not see them (another session)."""
        blocks: list[ContentBlock] = []
        for ref in refs:
            referenced = await self.kept(route, ref)
            projector = referenced.projector
            if projector.context_id != context_id:
                raise InvalidParams(f"referenceTaskIds: task {ref} belongs to another context")
            if referenced.record.session_id == session_id:
                continue  # this session's agent saw it
            texts = [p.text for a in projector.snapshot(history_length=0).artifacts or () for p in a.parts if p.text]
            if texts:
                body = "".join(texts)[:_REFERENCE_CHARS]
                blocks.append(TextContent(text=f"[Earlier task {ref} answered:]\n{body}\n[End of task {ref}]\n\n"))
        return blocks

    # -- task lifecycle --------------------------------------------------------------------------
    def _state_changed(self, live: LiveTask, event: s.StreamResponse) -> None:
        if not live.ended:  # its end was staged by `_ended`
            live.session.stage_task(live.kept.row())
            self.rows.staged(live.session)
        if self.push is not None:
            self.push.notify(live.session, live.kept, event)

    def _ended(self, live: LiveTask) -> None:
        """The turn ended: the task's row goes with the flush that stores the turn's end."""
        p = live.projector
        live.session.stage_task(live.kept.row())
        state = live.session.front_state(A2AContext)
        if p.state in s.INTERRUPTED_STATES:
            state.held = p.task_id
        elif state.held == p.task_id:
            state.held = None
        self.rows.staged(live.session)
        if self.live.get(p.task_id) is live:
            del self.live[p.task_id]
        self._remember(live.kept)
        self._went_idle(live.session)

    def _went_idle(self, session: Session) -> None:
        self._idle[session.id] = time.monotonic()
        self._idle.move_to_end(session.id)
        if len(self._idle) > self.cfg.max_idle_sessions:
            self._reap_now.set()
        if not self._reaper_running:
            self._reaper_running = True
            session.shared_nursery.start_soon(self._reaper)

    def _remember(self, kept: Kept) -> None:
        self._recent[kept.task_id] = kept
        self._recent.move_to_end(kept.task_id)
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
        return (await self.kept(route, task_id)).projector

    def _in_memory(self, route: str, task_id: str) -> Kept | None:
        """The task if it is in memory (running, or recent); NotFound if it is another route's."""
        live = self.live.get(task_id)
        kept = live.kept if live is not None else self._recent.get(task_id)
        if kept is None:
            return None
        if kept.record.route != route:
            raise NotFound(f"unknown task {task_id!r}")
        if live is None:
            if kept.projector.state not in s.TERMINAL_STATES and not self.manager.cluster.solo:
                return None  # another instance may have carried it on since: read it again
            self._recent.move_to_end(task_id)
        return kept

    async def kept(self, route: str, task_id: str, *, record: TaskRecord | None = None) -> Kept:
        """The task: running, recent, else read from the store (`record`: its row, if read already)."""
        kept = self._in_memory(route, task_id)
        if kept is None:
            read = await replay(self.manager, route, task_id, record)
            kept = self._in_memory(route, task_id)  # read meanwhile by another request: one copy
            if kept is None:
                kept = read
                if read.projector.current_turn is None:  # else it runs on another instance: read it again
                    self._remember(kept)
        return kept

    # -- cancel ------------------------------------------------------------------------------------
    async def cancel(self, route: str, task_id: str) -> TaskProjector:
        live = self.live.get(task_id) or await follow(self, route, task_id)
        if live is not None and live.kept.record.route == route:
            await live.session.send_cancel()
            with trio.move_on_after(live.session.route.cancel_grace_s + 2):
                await live.wait_ended()
            return live.projector
        kept = await self.kept(route, task_id)
        projector = kept.projector
        if projector.state in s.TERMINAL_STATES:
            raise A2AFault("TaskNotCancelable", f"task {task_id} is already {projector.state}")
        # Interrupted, its turn over: nothing runs; the task just ends canceled.
        event = projector.feed_canceled(time.time())
        session = await self.manager.get(kept.record.session_id)
        state = session.front_state(A2AContext)
        if state.held == task_id:
            state.held = None
        session.stage_task(kept.row())
        await session.save_record()
        self._went_idle(session)
        if self.push is not None:
            self.push.notify(session, kept, event)
        self.waiting.end(task_id, event)
        return projector

    # -- listing ---------------------------------------------------------------------------------
    async def list(self, route: str, req: s.ListTasksRequest, visible: Visible | None = None) -> s.ListTasksResponse:
        """`visible`: only the tasks of contexts one caller may list (bridge/fronts/owners.py)."""
        return await list_tasks(self, route, req, visible)


def _holds_a_task(session: Session) -> bool:
    """An interrupted task waits in this session for the client's next message."""
    state = session.find_front_state(A2AContext)
    return state is not None and bool(state.held)


def _client_meta(msg: s.Message) -> dict[str, Any] | None:
    """The client's own `metadata` and `extensions` of its message (a2a.proto `Message`), as
    `TurnStarted.meta`: a back that speaks A2A sends them on (bridge/codecs/a2a.py `user_message`)."""
    meta = {k: v for k, v in (("metadata", msg.metadata), ("extensions", msg.extensions)) if v}
    return meta or None


def _accepts(modes: list[str]) -> bool:
    return any(m.split(";")[0].strip() in ("text/plain", "text/*", "*/*", "application/json", "*") for m in modes)
