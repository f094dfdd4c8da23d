"""The turn state machine, in one table (the h11 `_state.py` shape).

Rules:
- A session runs at most one turn at a time. A turn starts IDLE → RUNNING on a prompt.
- While RUNNING the back may ask the user a question: RUNNING → AWAITING_ANSWER.
  Several questions may be open at once (sub-agents); the turn goes back to RUNNING
  when the last one is answered.
- A cancel from RUNNING or AWAITING_ANSWER moves to CANCELLING: open questions are
  resolved as cancelled, the back is told to stop, and the turn ends once it has
  stopped (or the bound expires).
- The turn ENDS from RUNNING, AWAITING_ANSWER or CANCELLING; an ended turn takes
  no further input. The session's next turn is a new machine.
- Anything else is illegal and raises `IllegalTransition` from `TurnMachine.apply`.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["IllegalTransition", "TurnInput", "TurnMachine", "TurnState", "TRANSITIONS"]


class TurnState(Enum):
    IDLE = "idle"
    RUNNING = "running"
    AWAITING_ANSWER = "awaiting_answer"
    CANCELLING = "cancelling"
    ENDED = "ended"


class TurnInput(Enum):
    PROMPT = "prompt"
    ASK = "ask"
    ANSWER = "answer"  # the last open question was answered
    ANSWER_ONE = "answer_one"  # a question was answered, others stay open
    CANCEL = "cancel"
    END = "end"


S, I = TurnState, TurnInput

TRANSITIONS: dict[tuple[TurnState, TurnInput], TurnState] = {
    (S.IDLE, I.PROMPT): S.RUNNING,
    (S.RUNNING, I.ASK): S.AWAITING_ANSWER,
    (S.AWAITING_ANSWER, I.ASK): S.AWAITING_ANSWER,
    (S.AWAITING_ANSWER, I.ANSWER_ONE): S.AWAITING_ANSWER,
    (S.AWAITING_ANSWER, I.ANSWER): S.RUNNING,
    (S.RUNNING, I.CANCEL): S.CANCELLING,
    (S.AWAITING_ANSWER, I.CANCEL): S.CANCELLING,
    (S.CANCELLING, I.CANCEL): S.CANCELLING,  # a second cancel is harmless
    (S.CANCELLING, I.ANSWER): S.CANCELLING,  # questions resolved as cancelled
    (S.CANCELLING, I.ANSWER_ONE): S.CANCELLING,
    (S.RUNNING, I.END): S.ENDED,
    (S.AWAITING_ANSWER, I.END): S.ENDED,
    (S.CANCELLING, I.END): S.ENDED,
}


class IllegalTransition(Exception):
    def __init__(self, state: TurnState, event: TurnInput) -> None:
        super().__init__(f"turn cannot {event.value} while {state.value}")
        self.state = state
        self.event = event


class TurnMachine:
    """One turn's state; `apply` is the only way to change it."""

    __slots__ = ("state", "open_questions")

    def __init__(self) -> None:
        self.state = TurnState.IDLE
        self.open_questions: set[str] = set()

    def apply(self, event: TurnInput) -> TurnState:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise IllegalTransition(self.state, event) from None
        return self.state

    def ask(self, question_id: str) -> TurnState:
        state = self.apply(TurnInput.ASK)
        self.open_questions.add(question_id)
        return state

    def answer(self, question_id: str) -> TurnState:
        if question_id not in self.open_questions:
            raise KeyError(question_id)
        self.open_questions.discard(question_id)
        return self.apply(TurnInput.ANSWER_ONE if self.open_questions else TurnInput.ANSWER)

    @property
    def active(self) -> bool:
        return self.state in (TurnState.RUNNING, TurnState.AWAITING_ANSWER, TurnState.CANCELLING)
