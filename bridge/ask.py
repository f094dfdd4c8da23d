"""`agent-bridge ask ROUTE PROMPT`: one turn, run in this process from the config, shown
as it streams (bridge/render.py), its questions answered by flags or on the terminal.

Exit codes (named here; README, "Commands"):

- 0 (`ASK_OK`): the turn ended (end_turn, refusal, max_tokens, max_turn_requests, or a
  question declined by `--answer reject`);
- 1 (`ASK_FAILED`): the turn failed, or stdout was closed under it (then it is cancelled);
- 2 (`ASK_USAGE`): the command line names no such route or session (click's own usage
  errors exit 2 too);
- 3 (`ASK_UNANSWERED`): a question was left unanswered: the flags could not answer it
  and stdin is not a terminal (or ended), so the turn is cancelled; or the agent ended
  the turn waiting for input (`input_required`);
- 130 (`ASK_INTERRUPTED`): Ctrl-C (SIGINT). The first cancels the turn the protocol way
  (the back is told; the turn ends `cancelled` and is shown so), a second stops without
  waiting for it to show (`_CtrlC`). SIGTERM and SIGHUP stop the same way and exit 128 +
  the signal's number.

A config error exits 78 (EX_CONFIG), as every command does.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from bridge.ask_answers import AnswerFlags, answer_by_flags
from bridge.core.content import TextContent
from bridge.core.events import Event, Question, QuestionAnswered, StopReason
from bridge.errors import BridgeError

if TYPE_CHECKING:
    from bridge.ask_terminal import Echo, Terminal
    from bridge.status_line import StatusLine

__all__ = [
    "ASK_FAILED",
    "ASK_INTERRUPTED",
    "ASK_OK",
    "ASK_UNANSWERED",
    "ASK_USAGE",
    "AskRequest",
    "run_ask",
]

ASK_OK = 0
ASK_FAILED = 1
ASK_USAGE = 2
ASK_UNANSWERED = 3
ASK_INTERRUPTED = 128 + signal.SIGINT

_CANNOT_ASK = "cannot ask: stdin is not a terminal; pass --answer allow|reject|first, --answer-option or --answer-text"


@dataclass(frozen=True)
class AskRequest:
    """The command line of one `ask`."""

    route: str
    prompt: str
    flags: AnswerFlags = AnswerFlags()
    json: bool = False
    session_id: str | None = None


class _Questions:
    """Answers each question as it is asked: by the flags, else on the terminal, else
    it is left unanswered and the turn is cancelled."""

    def __init__(
        self,
        session: Any,
        flags: AnswerFlags,
        *,
        terminal: Terminal | None = None,
        note: Callable[[str], None] = print,
        status: StatusLine | None = None,
    ) -> None:
        self.session = session
        self.flags = flags
        self.terminal = terminal
        self.note = note
        self.status = status
        self.unanswered: list[str] = []
        self.nursery: trio.Nursery | None = None
        self._asking: dict[str, trio.CancelScope] = {}

    def asked(self, q: Question) -> None:
        if self.nursery is not None:
            self.nursery.start_soon(self._answer, q)

    def settled(self, question_id: str) -> None:
        """Answered (by us, a timeout or a cancel): stop asking it on the terminal."""
        scope = self._asking.pop(question_id, None)
        if scope is not None:
            scope.cancel()

    async def _answer(self, q: Question) -> None:
        answer = answer_by_flags(q, self.flags)
        if answer is None and self.terminal is not None:
            with trio.CancelScope() as scope:
                self._asking[q.id] = scope
                if self.status is not None:
                    self.status.pause()
                try:
                    answer = await self.terminal.answer(q)
                finally:
                    self._asking.pop(q.id, None)
                    if self.status is not None:
                        self.status.resume()
            if scope.cancelled_caught:
                return  # settled while the user was typing
        if answer is None:
            self.unanswered.append(q.prompt)
            self.note(_CANNOT_ASK if self.terminal is None else "stdin ended: the question is left unanswered")
            self.session.cancel()
            return
        try:
            self.session.answer(q.id, **answer)
        except BridgeError as exc:
            self.note(f"answer not taken: {exc.message}")


class _Ask:
    """The session subscriber of `ask`: the renderer, and the questions to answer. A
    stdout closed under it (`ask ... | head`) cancels the turn: nobody reads it any more."""

    protocol = "cli"

    def __init__(self, render: Any, questions: _Questions) -> None:
        self.render = render
        self.questions = questions
        self.stdout_closed = False

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        await trio.lowlevel.checkpoint()

    def deliver(self, event: Event) -> None:
        if isinstance(event, QuestionAnswered):
            self.questions.settled(event.question_id)
        if self.stdout_closed:
            return
        try:
            self.render.deliver(event)
        except BrokenPipeError:
            self.stdout_closed = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere, quietly
            os.close(devnull)
            self.questions.session.cancel()


class _CtrlC:
    """Ctrl-C during `ask`: the first cancels the turn the protocol way (the session's
    cancel: the back is told, the turn ends `cancelled` and is rendered so); a second
    stops waiting for it, and the runtime closes the session (its turn cancelled within
    the route's `cancel_grace_s`); one more, or one before the turn runs, stops at once.
    SIGTERM and SIGHUP are a second Ctrl-C (exit 128 + the signal), so the terminal's
    echo is still restored."""

    def __init__(self) -> None:
        self.session: Any = None
        self.turn_scope: trio.CancelScope | None = None
        self.pressed = 0
        self.stopped_by: int | None = None

    async def watch(self, everything: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGINT:
                    self.pressed += 1
                    if self.pressed == 1 and self.session is not None and self.session.cancel():
                        continue
                    self.pressed = max(self.pressed, 2)
                elif self.stopped_by is None:
                    self.stopped_by = 128 + signum
                if self.turn_scope is not None and not self.turn_scope.cancel_called:
                    self.turn_scope.cancel()  # open_runtime closes the session, the turn cancelled
                else:
                    everything.cancel()
                    return


def _outputs(req: AskRequest, questions: _Questions) -> tuple[Any, StatusLine | None, Callable[[str], None]]:
    """(the subscriber that prints, the status line or None, a writer of notes)."""
    from bridge.render import JsonLines, Renderer, terminal_safe

    if req.json:
        err_tty = sys.stderr.isatty()

        def note(text: str) -> None:
            sys.stderr.write((terminal_safe(text) if err_tty else text) + "\n")
            sys.stderr.flush()

        return JsonLines(sys.stdout.buffer, on_question=questions.asked), None, note
    from bridge.status_line import StatusLine

    tty = sys.stdout.isatty()
    status = StatusLine(sys.stdout, enabled=tty, color=tty)
    renderer = Renderer(sys.stdout, color=tty, status=status, on_question=questions.asked)
    return renderer, status, renderer.note


def _same_terminal(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _on_the_terminal(
    req: AskRequest, render: Any, note: Callable[[str], None], status: StatusLine | None, questions: _Questions
) -> list[Echo]:
    """Questions asked on the terminal when stdin is one; the echo of the terminals off
    while the turn streams. The `Echo`s to restore at the end."""
    if not sys.stdin.isatty() and (status is None or not status.enabled):
        return []
    from bridge.ask_terminal import Echo, Terminal

    echoes = [Echo(sys.stdout.fileno())] if status is not None and status.enabled else []
    if sys.stdin.isatty():
        if not echoes or not _same_terminal(sys.stdin.fileno(), sys.stdout.fileno()):
            echoes.append(Echo(sys.stdin.fileno()))
        show = note if req.json else render.line
        if req.json:  # stdout is for scripts: the question is shown where it is answered

            def asked(q: Question) -> None:
                show("? " + (f"[{q.header}] " if q.header else "") + q.prompt)
                for i, opt in enumerate(q.options, 1):
                    show(f"  {i}. {opt.label}")
                questions.asked(q)

            render.on_question = asked
        questions.terminal = Terminal(show, echo=echoes[-1])
    for echo in echoes:
        echo.set(False)
    return echoes


async def _one_turn(config: Any, state_dir: str, req: AskRequest, ctrl_c: _CtrlC) -> int:
    from bridge.daemon import open_runtime

    async with open_runtime(config, state_dir) as manager:
        try:
            if req.session_id:
                session = await manager.get(req.session_id)
            else:
                session = await manager.create(req.route, front="cli", cwd=os.getcwd())
        except BridgeError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return ASK_USAGE
        questions = _Questions(session, req.flags)
        render, status, note = _outputs(req, questions)
        questions.note, questions.status = note, status
        echoes = _on_the_terminal(req, render, note, status, questions)
        ended = None
        subscriber = _Ask(render, questions)
        try:
            with trio.CancelScope() as ctrl_c.turn_scope:
                async with trio.open_nursery() as nursery:
                    questions.nursery = nursery
                    if status is not None:
                        await nursery.start(status.run)
                    session.subscribe(subscriber)
                    ctrl_c.session = session
                    ended = await session.start_turn([TextContent(text=req.prompt)]).wait()
                    nursery.cancel_scope.cancel()
        finally:
            ctrl_c.turn_scope = None
            if status is not None:
                status.close()
            for echo in echoes:
                echo.restore()
        print(f"session: {session.id}", file=sys.stderr)
        if ctrl_c.stopped_by is not None:
            return ctrl_c.stopped_by
        if ctrl_c.pressed or ended is None:
            return ASK_INTERRUPTED
        if subscriber.stdout_closed:
            return ASK_FAILED
        if questions.unanswered or ended.stop_reason is StopReason.INPUT_REQUIRED:
            return ASK_UNANSWERED
        return ASK_FAILED if ended.stop_reason is StopReason.FAILED else ASK_OK


def run_ask(config: Any, state_dir: str, req: AskRequest) -> int:
    """Run one turn and return the exit code."""
    if req.route not in config.routes:
        from bridge.config_check import did_you_mean

        near = did_you_mean(req.route, config.routes)
        print(f"no route named {req.route!r}; {near + ' ' if near else ''}routes are: {', '.join(sorted(config.routes))}", file=sys.stderr)
        return ASK_USAGE

    async def main() -> int:
        ctrl_c, code = _CtrlC(), ASK_INTERRUPTED
        async with trio.open_nursery() as nursery:
            await nursery.start(ctrl_c.watch, nursery.cancel_scope)
            code = await _one_turn(config, state_dir, req, ctrl_c)
            nursery.cancel_scope.cancel()
        return ctrl_c.stopped_by if ctrl_c.stopped_by is not None else code

    return trio.run(main)
