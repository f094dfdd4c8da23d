"""`agent-bridge ask`'s live status line: a spinner, the time since the turn started and
the last thing that happened, kept on the line below the reply while the turn runs.

Only when stdout is a terminal (never in a pipe, never with `--json`). It lives on the
line below the cursor, so a reply streaming mid-line is never broken: to draw, the
cursor moves down one line with IND (ESC D, which scrolls when it is on the last line)
and back with RI (ESC M), which makes sure that line exists, then saves the cursor
(DECSC, ESC 7), writes the status on the next line and restores the cursor (DECRC,
ESC 8). To erase, the same save, down, clear (EL, CSI K), restore. ECMA-48 §8.3.

The reply is written through `write`, which knows the cursor's column: text that stays
on the cursor's line leaves the status line alone (no flicker); text that ends the line
or wraps erases it first and draws it again after, in one write. Anything else written
to the terminal (stderr, a question's prompt) calls `clear` first. It is never drawn
while the cursor waits at the right margin to wrap (DECRC would lose the pending wrap
and the next character would overwrite the last one), nor after a tab or a carriage
return, whose column is not known, until the next line; nor after a wide character that
started in the last column (terminals wrap it, or not), until the next line.
"""

from __future__ import annotations

import os
import re
import time
import unicodedata
from collections.abc import Callable
from typing import TextIO

import trio

__all__ = ["DRAW", "ERASE", "FRAMES", "StatusLine"]

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
DRAW = "\x1bD\x1bM\x1b7\x1bD\r\x1b[K{}\x1b8"
ERASE = "\x1b7\x1bD\r\x1b[K\x1b8"
_TICK_S = 0.1  # the spinner's period
_SGR = re.compile(r"\x1b\[[0-9;]*m")  # colours: no width
_IDLE_SHOWN_S = 2.0  # from then on, the time since the last event is shown too
_ACTIVITY_CHARS = 200


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in text)


def _straddles(col: int, text: str, columns: int) -> bool:
    """Whether a wide character of `text`, written from column `col`, would start in the
    last column: terminals differ there (xterm wraps it, others clip it or wait), so the
    cursor's column is no longer known."""
    for c in text:
        w = _width(c)
        if w == 2 and col % columns == columns - 1:
            return True
        col += w
    return False


def _fit(text: str, columns: int) -> str:
    """`text` cut to fit `columns` cells (a wrapped status line could not be erased)."""
    if _width(text) <= columns:
        return text
    out, used = [], 0
    for c in text:
        w = _width(c)
        if used + w > columns - 1:
            break
        out.append(c)
        used += w
    return "".join(out) + "…"


def _printable(text: str) -> str:
    """One line without control characters: what an agent sends never moves the cursor."""
    line = " ".join(text.split())[:_ACTIVITY_CHARS]
    return "".join(c for c in line if unicodedata.category(c)[0] != "C")


class StatusLine:
    """Drawn by `run` (a task); the reply goes through `write`; `clear` before any other
    write to the terminal; `note` what happened."""

    def __init__(self, out: TextIO, *, enabled: bool, color: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.enabled = enabled
        self.color = color
        self.clock = clock
        self.started = self.last_event = clock()
        self.activity = "starting"
        self.drawn = False
        self.column: int | None = 0  # cells written on the cursor's line; None: not known
        self._paused = 0
        self._frame = 0

    def note(self, activity: str) -> None:
        self.activity = _printable(activity) or self.activity
        self.last_event = self.clock()

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.out.fileno()).columns or 80  # 0: a terminal of no known size
        except (OSError, ValueError):
            return 80

    def _can_draw(self, columns: int) -> bool:
        """Not paused, and the cursor's column known and not at the right margin."""
        col = self.column
        return self.enabled and not self._paused and col is not None and not (col > 0 and col % columns == 0)

    def write(self, text: str) -> None:
        """Write the reply's `text` (with colours, without other escapes) and flush."""
        columns = self._columns()
        head, newline, tail = text.rpartition("\n")
        last = tail if newline else text
        col = self.column
        plain = _SGR.sub("", last)
        start = 0 if newline else col
        wide = _width(plain)
        if "\t" in last or "\r" in last or start is None:
            after: int | None = None
        elif wide != len(plain) and _straddles(start, plain, columns):  # wide or combining characters: where do they land?
            after = None
        else:
            after = start + wide
        leaves_line = bool(newline) or col is None or after is None or (col % columns) + (after - col) >= columns
        if self.drawn and leaves_line:
            self.out.write(ERASE)
            self.drawn = False
        self.out.write(text)
        self.column = after
        if leaves_line and not self.drawn and self._can_draw(columns):
            self._draw(columns)
        self.out.flush()

    def clear(self) -> None:
        """Erase the line if it is drawn; call before writing anything else."""
        if self.drawn:
            self.drawn = False
            self.out.write(ERASE)
            self.out.flush()

    def pause(self) -> None:
        """Not drawn until `resume` (while a question is asked on the terminal)."""
        self._paused += 1
        self.clear()

    def resume(self) -> None:
        self._paused = max(0, self._paused - 1)

    def close(self) -> None:
        self.clear()
        self.enabled = False

    def text(self) -> str:
        now = self.clock()
        line = f"{FRAMES[self._frame % len(FRAMES)]} {now - self.started:.1f}s · {self.activity}"
        idle = now - self.last_event
        if idle >= _IDLE_SHOWN_S:
            line += f" · {idle:.0f}s since the last event"
        return line

    def _draw(self, columns: int) -> None:
        self._frame += 1
        line = _fit(self.text(), max(columns - 1, 10))
        self.out.write(DRAW.format(f"\x1b[2m{line}\x1b[0m" if self.color else line))
        self.drawn = True

    def tick(self) -> None:
        """Draw (or redraw: the spinner turns, the time goes on) if it can be."""
        columns = self._columns()
        if self._can_draw(columns):
            self._draw(columns)
            self.out.flush()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if not self.enabled:
            return
        try:
            while self.enabled:
                await trio.sleep(_TICK_S)
                self.tick()
        finally:
            self.close()
