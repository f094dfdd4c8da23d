"""The chat projector's bookkeeping: sequence numbers, turn projections, encoding.

`TurnBook` is the base of `ChatProjector` (codecs/chat.py, where the stream's shape is
described): it numbers every frame of a session (gapless, from 1), encodes the ones
past `skip_through`, and opens and closes the turn projections of the current run:
the user turn, the root assistant turn and a child turn per fork (Blade `api/chat-flow.md`, forks). Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from bridge.core import events as ev
from bridge.schema.chat import (
    PatchEnvelope,
    RunOptions,
    ServerFrame,
    ToolCallProjection,
    TurnProjection,
)

__all__ = ["Frame", "ProjectedRun", "ProjectedTurn", "TurnBook", "encode_frame"]

Frame = tuple[int, bytes]  # (sequence, the encoded frame)

_enc = msgspec.json.Encoder()


def encode_frame(event: str, data: Any) -> bytes:
    return _enc.encode(ServerFrame(event, data))


class ProjectedTurn:
    """One turn projection of the run being streamed, and what streaming into it needs to know
    (not `bridge.session` turns: a chat run has a turn per LLM step and per fork)."""

    __slots__ = ("proj", "block_key", "plan_index", "asks", "open", "t0")

    def __init__(self, proj: TurnProjection, t0: float | None) -> None:
        self.proj = proj
        self.block_key: tuple[str, str | None] | None = None  # the streaming block at the end, if any
        self.plan_index: int | None = None
        self.asks = 0
        self.open = True
        self.t0 = t0


class ProjectedRun:
    """The chat run being streamed (= one canonical turn): its root turn and its fork turns."""

    __slots__ = ("turn_id", "root", "children", "order", "forks", "t0", "data")

    def __init__(self, turn_id: str, root: ProjectedTurn, t0: float | None) -> None:
        self.turn_id = turn_id
        self.data: list[Any] = []  # a headless run's structured output (its chat:end result)
        self.root = root
        self.children: dict[str, ProjectedTurn] = {}
        self.order: list[ProjectedTurn] = []
        self.forks: dict[str, int] = {}
        self.t0 = t0


class TurnBook:
    __slots__ = (
        "session_id", "sequence", "skip_through", "turn_times", "on_checkpoint", "_run_options", "_keep_check", "_clock",
        "_max", "_keep", "_transcript", "_run", "_tools", "_asks", "_ask_ids", "_out",
    )  # fmt: skip

    def __init__(
        self,
        session_id: str,
        *,
        run_options: Callable[[str], RunOptions | None] | None = None,
        keep_check: Callable[[str, dict[str, Any]], None] | None = None,
        turn_times: Mapping[str, tuple[float, float | None]] | None = None,
        clock: Callable[[], float] | None = None,
        block_max_chars: int = 2048,
        keep_transcript: bool = False,
        skip_through: float = 0,
        on_checkpoint: Callable[[str, int], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.sequence = 0
        # Frames numbered up to here are counted but not encoded (a replay's known part).
        self.skip_through = skip_through
        self._run_options = run_options or (lambda _turn_id: None)
        # Where a run's output check is stored, once computed (RunOptions.check).
        self._keep_check = keep_check or (lambda _turn_id, _check: None)
        # Stored (started_at, ended_at) per canonical turn; settable until the turn is fed.
        self.turn_times: Mapping[str, tuple[float, float | None]] = turn_times or {}
        # Told (turn id, checkpoint) as each run starts: the sequence before its `chat:start`
        # (codecs/chat.py, "Checkpoints").
        self.on_checkpoint = on_checkpoint
        self._clock = clock
        self._max = block_max_chars
        self._keep = keep_transcript
        self._transcript: list[TurnProjection] = []
        self._run: ProjectedRun | None = None
        self._tools: dict[str, tuple[ProjectedTurn, ToolCallProjection, float | None]] = {}
        self._asks: dict[str, tuple[ev.Question, ProjectedTurn]] = {}  # AskUserQuestion id → its question
        self._ask_ids: dict[str, str] = {}  # question id → AskUserQuestion id
        self._out: list[Frame] = []

    def transcript(self) -> list[TurnProjection]:
        """Every turn projection so far, in the order they started (`keep_transcript=True`)."""
        return self._transcript

    # -- emitting ---------------------------------------------------------------------
    def _next(self, turn: ProjectedTurn | None = None) -> int:
        self.sequence += 1
        if turn is not None:
            turn.proj.sequence = self.sequence
        return self.sequence

    def _frame(self, event: str, data: Any) -> None:
        if data.sequence > self.skip_through:
            self._out.append((data.sequence, _enc.encode(ServerFrame(event, data))))

    def _patch(self, turn: ProjectedTurn, patch_type: str, body: Any) -> None:
        seq = self._next(turn)
        if seq > self.skip_through:
            p = turn.proj
            env = PatchEnvelope(
                session_id=self.session_id,
                sequence=seq,
                turn_id=p.turn_id,
                loop_id=p.loop_id,
                patch_type=patch_type,
                data=body,
            )
            self._out.append((seq, _enc.encode(ServerFrame("turn:patch", env))))

    def _turn_frame(self, event: str, turn: ProjectedTurn) -> None:
        self._next(turn)
        self._frame(event, turn.proj)

    def _now(self) -> float | None:
        return self._clock() if self._clock is not None else None

    # -- turns ------------------------------------------------------------------------
    def _open_turn(
        self, turn_id: str, *, role: str = "assistant", loop: str = "root", parent: str | None = None, t0: float | None
    ) -> ProjectedTurn:
        proj = TurnProjection(
            id=turn_id,
            session_id=self.session_id,
            turn_id=turn_id,
            loop_id=loop,
            role=role,  # type: ignore[arg-type]
            status="streaming",
            blocks=[],
            tool_calls=[],
            started_at=t0,
            parent_fork_tool_call_id=parent,
        )
        if self._keep:
            self._transcript.append(proj)
        return ProjectedTurn(proj, t0)

    def _close_turn(self, turn: ProjectedTurn, status: str, end: float | None) -> None:
        turn.open = False
        turn.proj.status = status
        if turn.t0 is not None and end is not None:
            turn.proj.duration_ms = max(0, round((end - turn.t0) * 1000))
        self._turn_frame("turn:end", turn)

    def _turn(self, parent: str | None) -> ProjectedTurn | None:
        run = self._run
        if run is None:
            return None  # backs only emit inside a turn; anything else has no place here
        if parent is None:
            return run.root
        child = run.children.get(parent)
        if child is None or not child.open:
            n = run.forks[parent] = run.forks.get(parent, 0) + 1
            tid = f"{run.turn_id}:fork:{parent}" + (f":{n}" if n > 1 else "")
            child = self._open_turn(tid, loop=f"fork:{parent}", parent=parent, t0=self._now())
            run.children[parent] = child
            run.order.append(child)
            self._turn_frame("turn:start", child)
        return child
