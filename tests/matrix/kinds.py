"""The event kinds of the pair matrix, as the demo agent's words, and what each must produce.

This is the contract between the matrix's two halves:

- every back row runs an agent that answers these prompts (the demo itself; a second
  agent-bridge's demo behind the chat back; the test peers started with `--matrix`,
  which speak the demo's words in their own protocol) and should produce, in the
  canonical model, the `Seen` of the kind (`back_produces` says where a protocol
  cannot: a degraded or absent kind, with the reason);
- every front column drives the prompt through its official SDK or wire client,
  answers questions the way `Kind.answer` says, and folds what it was shown into a
  `Seen`; the front's table says how it shows each kind.

Values are the demo's (bridge/backs/demo/back.py); a peer copies them from here.
Ids (tool calls, messages, questions) differ per agent and session: `Seen` keeps them
by order of first appearance (`tool#1`, ...), never by value.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

DATA = {"key": "value", "count": 42, "ratio": 0.5, "nested": {"ok": True, "none": None}}
PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="

Stop = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"]


class Option(msgspec.Struct, frozen=True):
    id: str
    label: str
    kind: str | None = None  # allow_once | allow_always | reject_once | reject_always


class Asked(msgspec.Struct, frozen=True):
    kind: Literal["permission", "choice", "form"]
    prompt: str
    options: tuple[Option, ...] = ()
    multi_select: bool = False
    allow_text: bool = False
    tool: str | None = None  # the tool call it is about, by order ("tool#1")


class Tool(msgspec.Struct, frozen=True):
    title: str
    kind: str
    status: str  # the last status shown
    locations: tuple[str, ...] = ()  # "path" or "path:line"
    diffs: tuple[tuple[str, str | None, str], ...] = ()  # (path, old, new)
    text: str = ""  # text content of the tool call
    parent: str | None = None  # "tool#N" of its sub-agent


class Seen(msgspec.Struct, kw_only=True):
    """What a user was shown for one turn, protocol-free."""

    text: str = ""  # the answer: text chunks in order (a sub-agent's text is under children)
    thought: str = ""
    progress: str = ""  # status text beside the answer
    plan: tuple[tuple[str, str], ...] | None = None  # the last plan: (content, status)
    tools: tuple[Tool, ...] = ()  # by order of first appearance
    asked: tuple[Asked, ...] = ()
    children: dict[str, str] = {}  # sub-agent text by its parent "tool#N"
    data: tuple[Any, ...] = ()  # structured values, as values
    files: tuple[tuple[str, str], ...] = ()  # ("image", mime) / ("link", uri)
    usage: bool = False  # a usage report reached the client
    stop: Stop = "end_turn"
    error: str | None = None  # the failure's message (substring match)


class Answer(msgspec.Struct, frozen=True):
    """How a driver answers the turn's question: by option kind when its protocol
    carries kinds, else by `label`; `selected`/`text` for a choice."""

    option_kind: str | None = None
    label: str | None = None
    selected: tuple[str, ...] = ()  # option labels
    text: str | None = None


class Kind(msgspec.Struct, frozen=True):
    name: str
    prompt: str
    expect: Seen
    answer: Answer | None = None
    cancel_after_first_chunk: bool = False


READ_README = Tool(
    title="Read README.md",
    kind="read",
    status="completed",
    locations=("README.md:1",),
    text="# agent-bridge\nOne daemon, four agent protocols.\n",
)
EDIT_NOTES = dict(title="Edit notes.txt", kind="edit", locations=("notes.txt",))
PERMISSION = Asked(
    kind="permission",
    prompt="Edit notes.txt?",
    options=(
        Option("allow", "Allow", "allow_once"),
        Option("allow_always", "Always allow", "allow_always"),
        Option("reject", "Reject", "reject_once"),
        Option("reject_always", "Never allow", "reject_always"),
    ),
    tool="tool#1",
)
COLOURS = Asked(
    kind="choice",
    prompt="Which colours do you like?",
    options=(Option("red", "Red"), Option("green", "Green"), Option("blue", "Blue")),
    multi_select=True,
    allow_text=True,
)

KINDS: tuple[Kind, ...] = (
    Kind("text", "hello there", Seen(text="You said: hello there", usage=True)),
    Kind(
        "thought",
        "think: hello",
        Seen(thought="The user wrote 'hello'. Let me work out what to do.", text="You said: hello", usage=True),
    ),
    Kind("plan", "plan: hello", Seen(plan=(("Step: answer", "completed"),), text="You said: hello", usage=True)),
    Kind("tool", "tool: hello", Seen(tools=(READ_README,), text="You said: hello", usage=True)),
    Kind(
        "permission_allow_diff",
        "ask: hello",
        Seen(
            tools=(Tool(**EDIT_NOTES, status="completed", diffs=(("notes.txt", None, "hello"),)),),
            asked=(PERMISSION,),
            text="Edited notes.txt. You said: hello",
            usage=True,
        ),
        answer=Answer(option_kind="allow_once", label="Allow"),
    ),
    Kind(
        "permission_reject",
        "ask: hello",
        Seen(
            tools=(Tool(**EDIT_NOTES, status="failed"),),
            asked=(PERMISSION,),
            text="Understood, I left notes.txt alone. You said: hello",
            usage=True,
        ),
        answer=Answer(option_kind="reject_once", label="Reject"),
    ),
    Kind(
        "question",
        "choose: hello",
        Seen(asked=(COLOURS,), text="You chose: Red, Blue, teal. You said: hello", usage=True),
        answer=Answer(selected=("Red", "Blue"), text="teal"),
    ),
    Kind(
        "subagent",
        "fork: hello",
        Seen(
            tools=(
                Tool(title="Sub-agent: research", kind="think", status="completed", text="The sub-agent read README.md."),
                msgspec.structs.replace(READ_README, parent="tool#1"),
            ),
            thought="Looking into it in a sub-agent.",
            children={"tool#1": "The sub-agent read README.md."},
            text="You said: hello",
            usage=True,
        ),
    ),
    Kind("data", "data: hello", Seen(data=(DATA,), text="You said: hello", usage=True)),
    Kind(
        "files",
        "image: hello",
        Seen(files=(("image", "image/png"), ("link", "file:///README.md")), text="You said: hello", usage=True),
    ),
    Kind("progress", "progress: hello", Seen(progress="Working on it.", text="You said: hello", usage=True)),
    Kind("stop_max_tokens", "max_tokens: hello", Seen(text="You said: hello", usage=True, stop="max_tokens")),
    Kind("stop_max_turns", "max_turns: hello", Seen(text="You said: hello", usage=True, stop="max_turn_requests")),
    Kind("stop_refusal", "refuse: hello", Seen(text="I won't do that.", stop="refusal")),
    Kind("failure", "fail: hello", Seen(stop="error", error="failed on purpose")),
    Kind("cancel", "slow: hello", Seen(text="tick 1. ", stop="cancelled"), cancel_after_first_chunk=True),
)

BY_NAME = {k.name: k for k in KINDS}
