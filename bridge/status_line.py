"""`agent-bridge ask`'s live status line: a spinner, the time since the turn started and
the last thing that happened, drawn on a terminal whenever nothing streams.

Only when stdout is a terminal (never in a pipe, never with `--json`). It lives on the
line below the cursor, so a reply streaming mid-line is never broken: to draw, the
cursor moves down one line with IND (ESC D, which scrolls when it is on the last line)
and back with RI (ESC M), which makes sure that line exists, then saves the cursor
(DECSC, ESC 7), writes the status on the next line and restores the cursor (DECRC,
ESC 8). To erase, the same save, down, clear (EL, CSI K), restore. ECMA-48 §8.3.
Every other write of `ask` erases it first (`clear`); the spinner draws it again at its
next tick once nothing has been written for a moment.
"""

from __future__ import annotations

import os
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
_QUIET_S = 0.05  # how long nothing must have been written before it is drawn
_IDLE_SHOWN_S = 2.0  # from then on, the time since the last event is shown too
_ACTIVITY_CHARS = 200


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1 for c in text)


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
    """Drawn by `run` (a task); `clear` before any other write; `note` what happened."""

    def __init__(self, out: TextIO, *, enabled: bool, color: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.enabled = enabled
        self.color = color
        self.clock = clock
        self.started = self.last_event = self.last_write = clock()
        self.activity = "starting"
        self.drawn = False
        self._paused = 0
        self._frame = 0

    def note(self, activity: str) -> None:
        self.activity = _printable(activity) or self.activity
        self.last_event = self.clock()

    def clear(self) -> None:
        """Erase the line if it is drawn; call before writing anything else."""
        if self.drawn:
            self.drawn = False
            self.out.write(ERASE)
            self.out.flush()
        self.last_write = self.clock()

    def pause(self) -> None:
        """Not drawn until `resume` (while a question is asked on the terminal)."""
        self._paused += 1
        self.clear()

    def resume(self) -> None:
        self._paused = max(0, self._paused - 1)
        self.last_write = self.clock()

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

    def draw(self) -> None:
        self._frame += 1
        try:
            columns = os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError):
            columns = 80
        line = _fit(self.text(), max(columns - 1, 10))
        self.out.write(DRAW.format(f"\x1b[2m{line}\x1b[0m" if self.color else line))
        self.out.flush()
        self.drawn = True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if not self.enabled:
            return
        try:
            while self.enabled:
                await trio.sleep(_TICK_S)
                if self.enabled and not self._paused and self.clock() - self.last_write >= _QUIET_S:
                    self.draw()
        finally:
            self.close()
