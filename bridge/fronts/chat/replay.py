"""Chat frames re-derived from a run's checkpoint, never from a session's first event.

A frame's `sequence` counts every frame before it (codecs/chat.py), but a run's frames
depend only on its checkpoint (the `sequence` before its `chat:start`) and its own
events (codecs/chat.py, "Checkpoints"). Each turn keeps its checkpoint in the store as
`TurnRecord.stream_seq`: the live stream notes it on the turn's record as the run
starts (bridge/fronts/chat/streams.py, written with the turn's next flush), and a turn
that ran with nobody watching, or was stored before checkpoints were kept, gets it the
first time a reader projects across it (`Store.set_stream_seqs`): once per turn ever.

So a reader starts at the run holding the position it wants:

- `origin(store, session_id, after)`: the turn to project from for the frames after
  `after` (None: to reach the current position), found by index
  (`Store.turn_at_stream_seq`); frames from before the first stored turn are gone;
- `origin_of(store, session_id, turn)`: the turn to project from to reach `turn`'s run
  (itself when its checkpoint is stored);
- `feed_stored(...)`: a projector fed the stored events from a turn's `TurnStarted`,
  `TURN_PAGE` turn records (their times, their headless runs' options) and one page
  of events (`SessionManager.event_pages`) at a time, so memory stays bounded however
  long the history.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bridge.codecs.chat import ChatProjector, Frame
from bridge.errors import NotFound
from bridge.fronts.chat.runs import RunBook
from bridge.session import Session, SessionManager
from bridge.store import Store, TurnRecord

__all__ = ["TURN_PAGE", "feed_stored", "origin", "origin_of"]

log = logging.getLogger("bridge.fronts.chat")

TURN_PAGE = 128  # turn records a pass over the log holds at once
_END = 2**62  # past every stream position: "where the session is now"

Sink = Callable[[list[Frame]], Awaitable[None]]


async def origin(store: Store, session_id: str, after: int | None) -> TurnRecord | None:
    """The last turn whose checkpoint is at or before `after` (None: the last one with a
    checkpoint); None to project from the session's first event (no turn has one yet).

    NotFound when the frames after `after` are no longer stored: the first stored turn
    starts past it (a run's first checkpoint is 0, so the turns before it were removed)."""
    found = await store.turn_at_stream_seq(session_id, _END if after is None else after)
    if found is not None:
        return found
    first = await store.list_turns(session_id, limit=1)
    if after is not None and first and first[0].stream_seq is not None:
        raise NotFound(
            f"session {session_id}: the frames after sequence {after} are no longer stored (its history "
            f"starts after sequence {first[0].stream_seq}); subscribe with a later after_sequence"
        )
    return None


async def origin_of(store: Store, session_id: str, turn: TurnRecord) -> TurnRecord | None:
    """`turn` if its checkpoint is stored, else the last turn before it that has one;
    None to project from the session's first event."""
    if turn.stream_seq is not None:
        return turn
    before = turn.first_seq
    while True:
        older = await store.list_turns(session_id, before_seq=before, limit=TURN_PAGE, newest_first=True)
        for t in older:
            if t.stream_seq is not None:
                return t
        if len(older) < TURN_PAGE:
            return None
        before = older[-1].first_seq


async def feed_stored(
    manager: SessionManager,
    session_id: str,
    projector: ChatProjector,
    start: TurnRecord | None,
    *,
    live: Session | None = None,
    through_seq: int | None = None,
    sink: Sink | None = None,
    runs: RunBook | None = None,
) -> int:
    """Feed `projector` the stored events from `start`'s `TurnStarted` (None: from the
    first event) through `through_seq` (None: to the end), from `start`'s checkpoint;
    `sink` gets each page's frames; `runs` (the projector's run options) is told each
    page's turn records. Returns the last event fed (0: none).

    Each turn crossed whose checkpoint is not stored gets it (`set_stream_seqs`; the
    running turn's on its record too, or its next write would clear it). The projector
    keeps the times of the last turn only (the run that may still be open)."""
    store = manager.store
    if live is not None:
        await live.flush()  # its pending events, and its turns' records with them
    projector.sequence = (start.stream_seq or 0) if start is not None else 0
    after = start.first_seq - 1 if start is not None else 0
    bound = through_seq + 1 if through_seq is not None else None
    turns = await store.list_turns(session_id, after_seq=after, before_seq=bound, limit=TURN_PAGE)
    stored: dict[str, int | None] = {}
    marks: dict[str, int] = {}
    chained = projector.on_checkpoint

    def note(turn_id: str, seq: int) -> None:
        known = stored.get(turn_id)
        if known is None:  # not stored yet, or a turn that started after its page was read
            marks[turn_id] = seq
        elif known != seq:  # our bug: a replay from it would renumber what clients hold
            log.error("session %s: turn %s checkpoint %d stored, %d derived", session_id, turn_id, known, seq)
        if chained is not None:
            chained(turn_id, seq)

    projector.on_checkpoint = note
    last = 0
    carried: dict[str, tuple[float, float | None]] = {}  # the run a page's first start may close
    times = carried
    try:
        while True:
            more: list[TurnRecord] = []
            if len(turns) == TURN_PAGE:
                more = await store.list_turns(session_id, after_seq=turns[-1].first_seq, before_seq=bound, limit=TURN_PAGE)
            through = more[0].first_seq - 1 if more else through_seq
            stored = {t.turn_id: t.stream_seq for t in turns}
            times = {**carried, **{t.turn_id: (t.started_at, t.ended_at) for t in turns}}
            projector.turn_times = times
            if runs is not None:
                runs.note(turns)
            async for page in manager.event_pages(session_id, after, through_seq=through):
                frames = [f for e in page for f in projector.feed(e)]
                last = page[-1].seq
                if sink is not None and frames:
                    await sink(frames)
            await _keep(store, session_id, marks, live)
            if not more:
                break
            carried = {turns[-1].turn_id: times[turns[-1].turn_id]}
            turns, after = more, more[0].first_seq - 1
    finally:
        projector.on_checkpoint = chained
    final = turns[-1].turn_id if turns else None
    projector.turn_times = {final: times[final]} if final is not None else {}
    return last


async def _keep(store: Store, session_id: str, marks: dict[str, int], live: Session | None) -> None:
    if not marks:
        return
    turn = live.turn if live is not None else None
    if turn is not None and turn.record is not None and turn.turn_id in marks:
        turn.record.stream_seq = marks[turn.turn_id]
    await store.set_stream_seqs(session_id, dict(marks))
    marks.clear()
