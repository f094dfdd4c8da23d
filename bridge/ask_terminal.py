"""Questions asked on the terminal during `agent-bridge ask`: read what the user types
until it answers the question (bridge/ask_answers.py says what a line means).

A permission or a choice takes one line; a form is asked a field at a time. The prompt
(`> `) goes to stderr, what is typed comes from stdin, a line at a time and at most
`MAX_LINE` characters of it; the end of stdin (Ctrl-D) leaves the question unanswered.
"""

from __future__ import annotations

import contextlib
import json
import sys
import termios
from collections.abc import Callable
from typing import Any

import outcome
import trio

from bridge.ask_answers import Field, Retry, form_fields, parse_field, parse_reply
from bridge.core.events import Question
from bridge.render import terminal_safe

__all__ = ["MAX_LINE", "Echo", "Terminal"]

MAX_LINE = 64 * 1024  # characters of one typed line; the rest of a longer one is dropped


def _read_line() -> str:
    """One line of stdin ("" at its end), at most MAX_LINE characters of it kept."""
    line = sys.stdin.readline(MAX_LINE)
    rest = line
    while rest and not rest.endswith("\n"):
        rest = sys.stdin.readline(MAX_LINE)  # the part of an overlong line past the limit
    return line


def _write_prompt(prompt: str) -> None:
    sys.stderr.write(prompt)
    sys.stderr.flush()


def _hint(q: Question) -> str:
    if not q.options:
        return "type your answer"
    n = len(q.options)
    if q.multi_select:
        return f"type numbers (1-{n}) or labels, several separated by commas" + (", and your own text" if q.allow_text else "")
    return f"type a number (1-{n}) or a label" + (", or your own answer" if q.allow_text else "")


def _field_prompt(f: Field) -> str:
    what = f.type + (", several separated by commas" if f.type == "array" else "")
    what += ", required" if f.required else ""
    default = f" [{json.dumps(f.default, ensure_ascii=False)[:60]}]" if f.default is not None else ""
    return f"  {f.title} ({what}){default}: "


class Echo:
    """The terminal's echo of what is typed (termios `ECHO`), off while the turn streams,
    so keys pressed meanwhile (or Ctrl-C's `^C`) never land in the reply or under the
    status line; on while a question is asked; as it was when `restore`d."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        try:
            self._saved: list[Any] | None = termios.tcgetattr(fd)
        except termios.error:
            self._saved = None

    def set(self, on: bool) -> None:
        if self._saved is None or not self._saved[3] & termios.ECHO:
            return  # not a terminal, or its echo was off already: leave it so
        attrs = termios.tcgetattr(self.fd)
        attrs[3] = attrs[3] | termios.ECHO if on else attrs[3] & ~termios.ECHO
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)

    def restore(self) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSANOW, self._saved)


class Terminal:
    """Asks questions on the terminal, one at a time (`show` writes a line for the user)."""

    def __init__(
        self,
        show: Callable[[str], None],
        *,
        echo: Echo | None = None,
        read_line: Callable[[], str] = _read_line,
        write_prompt: Callable[[str], None] = _write_prompt,
    ) -> None:
        self.show = show
        self.echo = echo
        self.read_line = read_line
        self.write_prompt = write_prompt
        self._lock = trio.Lock()
        # One thread reads stdin at a time. A read outlives the question it was for (the
        # question settled while the user typed): the next question waits for that same
        # line rather than start a second reader that would race it for stdin.
        self._reading = False
        self._waiting = False
        self._got = trio.Event()
        self._line: outcome.Outcome[str] | None = None

    def _done(self, line: outcome.Outcome[str]) -> None:
        self._reading = False
        if self._waiting:  # else it answered a question already settled: dropped
            self._line = line
            self._got.set()

    async def _read(self, prompt: str) -> str | None:
        if self.echo is not None:
            self.echo.set(True)
        self.write_prompt(terminal_safe(prompt))  # a form's titles come from the agent
        if not self._reading:
            self._reading = True
            self._got = trio.Event()
            token = trio.lowlevel.current_trio_token()

            def deliver(line: outcome.Outcome[str]) -> None:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(self._done, line)

            trio.lowlevel.start_thread_soon(self.read_line, deliver)
        self._waiting = True
        try:
            await self._got.wait()
        finally:
            self._waiting = False
            if self.echo is not None:
                self.echo.set(False)
        line, self._line = self._line, None
        text = line.unwrap() if line is not None else ""
        return text if text else None

    async def answer(self, q: Question) -> dict[str, Any] | None:
        """The answer typed for `q`; None when stdin ends first."""
        async with self._lock:
            if q.kind == "form" and not q.options:
                return await self._form(q)
            self.show(f"  ({_hint(q)})")
            while True:
                line = await self._read("> ")
                if line is None:
                    return None
                reply = parse_reply(q, line)
                if not isinstance(reply, Retry):
                    return reply
                self.show(f"  {reply.message}")

    async def _form(self, q: Question) -> dict[str, Any] | None:
        fields = form_fields(q.schema)
        if not fields:  # a form with no field we can read: its values as one JSON object
            self.show("  (type the answer as a JSON object)")
            while True:
                line = await self._read("> ")
                if line is None:
                    return None
                try:
                    value = json.loads(line)
                except ValueError:
                    value = None
                if isinstance(value, dict):
                    return {"values": value}
                self.show("  that is not a JSON object")
        self.show("  (an empty line keeps the default, or leaves an optional field out)")
        values: dict[str, Any] = {}
        for f in fields:
            if f.description and f.description != q.prompt:
                self.show(f"  {f.description[:500]}")
            for i, opt in enumerate(f.options, 1):
                self.show(f"    {i}. {opt.label}")
            while True:
                line = await self._read(_field_prompt(f))
                if line is None:
                    return None
                try:
                    value = parse_field(f, line)
                except ValueError as exc:
                    self.show(f"  {exc}")
                    continue
                if value is not None:
                    values[f.name] = value
                break
        return {"values": values}
