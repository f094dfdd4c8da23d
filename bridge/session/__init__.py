"""Live sessions: where fronts and backs meet (DESIGN.md, "Words": session, turn).

- bridge/session/manager.py: `SessionManager`, which creates, finds, caps and closes
  live sessions and owns their nursery.
- bridge/session/live.py: `Session`, one conversation: fan-out to subscribers, options,
  slash commands, idle tracking, typed per-front state.
- bridge/session/lifecycle.py: the manager as the daemon drives it (reload, drain, stop).
- bridge/session/commands.py: what a front sends a session (a turn, an answer, a
  cancel, an option), awaitable so the same front code drives a remote session.
- bridge/session/running.py: how a session runs a turn (deadlines, cancel, its end).
- bridge/session/remote.py, remote_turn.py, forwarding.py, owners.py: sessions another
  instance runs live (bridge/cluster/), followed and forwarded to.
- bridge/session/turn.py: `Turn`, the handle a back drives, and the answer checks.
- bridge/session/journal.py: events and records to the store in batches; the flusher.
- bridge/session/state.py: `FrontState`, a front's typed state kept in the record.
- bridge/session/interfaces.py: `Subscriber` and `TurnObserver`, what a session calls.
- bridge/session/supervised.py: `SupervisedNursery`, the manager's nursery as lent.
"""

from bridge.session.interfaces import Subscriber, TurnObserver
from bridge.session.live import Session
from bridge.session.manager import SessionManager
from bridge.session.state import FrontState, decode_front_state, stored_front_state
from bridge.session.supervised import SupervisedNursery
from bridge.session.turn import Turn

__all__ = [
    "FrontState",
    "Session",
    "SessionManager",
    "Subscriber",
    "SupervisedNursery",
    "Turn",
    "TurnObserver",
    "decode_front_state",
    "stored_front_state",
]
