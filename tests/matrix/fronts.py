"""The matrix's front columns: how each front's protocol shows each kind (Full / Degraded / Absent).

Kinds missing from a table are Full. A `Degraded.shows` turns the Seen the back
delivered into what this front's user gets; the reasons are README's footnotes.
"""

from __future__ import annotations

import json

import msgspec

from tests.matrix.kinds import BY_NAME, Asked, Seen
from tests.matrix.rows import Carry, Degraded, Full

__all__ = ["FRONTS", "FrontColumn", "as_choice", "as_labels", "data_as_text", "progress_as_thought", "without", "tools_without"]


class FrontColumn(msgspec.Struct, frozen=True):
    name: str
    title: str
    carries: dict[str, Carry]  # by kind name, and "usage" for the usage report every kind ends with


def without(**fields: object):  # noqa: ANN201 - a Seen → Seen
    """A Seen with these fields back to their defaults: what a protocol drops."""
    return lambda s: msgspec.structs.replace(s, **fields)


def tools_without(*names: str):  # noqa: ANN201
    blank = {"locations": (), "diffs": (), "kind": ""}
    return lambda s: msgspec.structs.replace(s, tools=tuple(msgspec.structs.replace(t, **{n: blank[n] for n in names}) for t in s.tools))


def both(*fns):  # noqa: ANN201, ANN002
    def apply(s: Seen) -> Seen:
        for fn in fns:
            s = fn(s)
        return s

    return apply


def as_choice(s: Seen) -> Seen:
    """A permission asked as a plain choice of labels (no option kinds, no tool call, free text possible)."""
    return msgspec.structs.replace(s, asked=tuple(
        Asked(kind="choice", prompt=a.prompt, options=tuple(msgspec.structs.replace(o, kind=None) for o in a.options),
              multi_select=a.multi_select, allow_text=True) for a in s.asked))  # fmt: skip


def without_free_text(s: Seen) -> Seen:
    return msgspec.structs.replace(s, asked=tuple(msgspec.structs.replace(a, allow_text=False) for a in s.asked))


def data_as_text(s: Seen) -> Seen:
    """Structured values shown as their JSON text before the answer (any JSON formatting)."""
    if not s.data:
        return s
    return msgspec.structs.replace(s, data=(), text="".join(json.dumps(v) + "\n" for v in s.data) + s.text)


def progress_as_thought(s: Seen) -> Seen:
    return msgspec.structs.replace(s, thought=s.progress + s.thought, progress="")


_ACP = {
    "subagent": Degraded(
        "ACP v1 has no sub-agents: the child's updates carry `_meta.agentBridge.parentToolCallId` (an editor that ignores it shows them inline)",
        lambda s: s,
    ),
    "question": Full("`elicitation/create` (form) when the editor declares it"),
    "data": Full("an embedded JSON resource (`data:application/json`)"),
    "progress": Full("`agent_thought_chunk` marked `_meta.agentBridge.progress`"),
}

_A2A_TOOL = "A2A has no tool calls: WORKING status messages with a `toolCall` data part (title, kind, status, text); no locations, a diff named but not carried"
_A2A = {
    "thought": Degraded("A2A has no thoughts: WORKING status messages tagged `metadata.agentBridge.kind`, never in the reply", lambda s: s),
    "plan": Degraded("A2A has no plan: a WORKING status message (text and a `plan` data part)", lambda s: s),
    "tool": Degraded(_A2A_TOOL, tools_without("locations", "diffs")),
    "permission_allow_diff": Degraded(_A2A_TOOL + "; the question is INPUT_REQUIRED with its options' kinds", tools_without("locations", "diffs")),
    "permission_reject": Degraded(_A2A_TOOL, tools_without("locations", "diffs")),
    "subagent": Degraded(_A2A_TOOL + "; the sub-agent's text in status messages tagged `subagent`", tools_without("locations", "diffs")),
    "data": Full("a `data` part (0.3: an object)"),
    "progress": Full("a WORKING status message, not in the reply artifact"),
    "usage": Degraded("A2A has no usage report", without(usage=False)),
}

_WS_TOOL = "the chat stream's tool calls have a name, a title, arguments and a result (a text, or items with diffs): no kind or locations"
_WS = {
    "tool": Degraded(_WS_TOOL, tools_without("kind", "locations")),
    "permission_allow_diff": Degraded("AskUserQuestion: a choice of labels, without option kinds or the tool call; " + _WS_TOOL,
                                      both(as_choice, tools_without("kind", "locations"))),  # fmt: skip
    "permission_reject": Degraded("AskUserQuestion (labels only); " + _WS_TOOL, both(as_choice, tools_without("kind", "locations"))),
    "subagent": Degraded("forks as child turns; " + _WS_TOOL, tools_without("kind", "locations")),
    "data": Degraded("no data item: a text item with the JSON text (a headless run's `chat:end` result carries it as output)", data_as_text),
    "progress": Degraded("no status item: a `thinking` item", progress_as_thought),
}

_MCP_DROPS = "a tool result is the answer only"
_MCP = {
    "thought": Degraded(_MCP_DROPS + ": no thoughts", without(thought="")),
    "plan": Degraded(_MCP_DROPS + ": no plan", without(plan=None)),
    "tool": Degraded(_MCP_DROPS + ": no tool calls", without(tools=())),
    "permission_allow_diff": Degraded("asked with `elicitation/create` (a form of labels: no kinds, no tool call, no free text); no tool calls",
                                      both(without(tools=()), as_choice, without_free_text)),  # fmt: skip
    "permission_reject": Degraded("asked with `elicitation/create` (labels only); no tool calls",
                                  both(without(tools=()), as_choice, without_free_text)),  # fmt: skip
    "question": Full("`elicitation/create` (form) when the client declares elicitation"),
    "subagent": Degraded(_MCP_DROPS + ": no sub-agent, tools or thoughts", without(tools=(), thought="", children={})),
    "data": Full("`structuredContent`, and its JSON text"),
    # A back that delivers progress as thinking (the chat stream) loses it here too: no thoughts.
    "progress": Degraded("not in the result: `notifications/progress` when the call has a progressToken", without(progress="", thought="")),
    "cancel": Degraded("`notifications/cancelled`: the cancelled call gets no result", without(text="")),
    "usage": Degraded("a tool result has no usage report", without(usage=False)),
}


def as_labels(s: Seen) -> Seen:
    """A question shown as its prompt and numbered labels: no option kinds, no tool call."""
    return msgspec.structs.replace(s, asked=tuple(
        Asked(kind="choice", prompt=a.prompt, options=tuple(msgspec.structs.replace(o, kind=None) for o in a.options))
        for a in s.asked))  # fmt: skip


def tool_lines(s: Seen) -> Seen:
    """Tool calls as terminal lines: status, title, kind, the text on one line (⏎, 120 characters)."""
    return msgspec.structs.replace(s, tools=tuple(
        msgspec.structs.replace(t, locations=(), diffs=(), text=t.text.strip().replace("\n", " ⏎ ")[:120]) for t in s.tools))  # fmt: skip


def first_option(s: Seen) -> Seen:
    """The choice answered with its first option only (the demo's reply names what was chosen)."""
    answer = BY_NAME["question"].answer
    assert answer is not None and answer.text
    return msgspec.structs.replace(s, text=s.text.replace(", ".join((*answer.selected, answer.text)), answer.selected[0]))


_ASK_TOOL = "one line per tool call and update: status, title, kind, its text on one line (⏎, 120 characters); a diff named, not shown; no locations"
_ASK_ASKED = "the prompt and numbered labels (no option kinds); `--answer allow|reject` answers by kind"
_ASK = {
    "thought": Full("dimmed"),
    "tool": Degraded(_ASK_TOOL, tool_lines),
    "permission_allow_diff": Degraded(f"{_ASK_ASKED}; {_ASK_TOOL}", both(as_labels, tool_lines)),
    "permission_reject": Degraded(f"{_ASK_ASKED}; {_ASK_TOOL}", both(as_labels, tool_lines)),
    "question": Degraded("numbered labels; without a terminal `--answer first` picks the first option (typed at a terminal, "
                         "or with `--answer-option`/`--answer-text`: options and free text together)", both(as_labels, first_option)),  # fmt: skip
    "subagent": Degraded("the sub-agent's lines marked ↳; " + _ASK_TOOL, tool_lines),
    "data": Degraded("pretty-printed JSON on stdout (a terminal has no structured values)", data_as_text),
    "files": Degraded("a one-line placeholder per image or link", lambda s: msgspec.structs.replace(s, files=tuple((k, "") for k, _ in s.files))),
    "progress": Full("a dim status line on stderr, never in the answer"),
    "cancel": Full("Ctrl-C (SIGINT) cancels the turn"),
}

FRONTS: tuple[FrontColumn, ...] = (
    FrontColumn("acp_stdio", "ACP over stdio (official Python SDK)", _ACP),
    FrontColumn("acp_socket", "ACP over the daemon's socket (`--connect`)", _ACP),
    FrontColumn("ws", "chat `/ws`", _WS),
    FrontColumn("a2a_jsonrpc", "A2A 1.0 JSON-RPC (a2a-sdk)", _A2A),
    FrontColumn("a2a_rest", "A2A 1.0 HTTP+JSON (a2a-sdk)", _A2A),
    FrontColumn("a2a_v03", "A2A 0.3 (a2a-sdk)", _A2A),
    FrontColumn("mcp", "MCP route tool (`mcp` SDK)", _MCP),
    FrontColumn("ask", "`agent-bridge ask` (terminal)", _ASK),
    FrontColumn("a2a_js_jsonrpc", "A2A 1.0 JSON-RPC (@a2a-js/sdk)", _A2A),
    FrontColumn("a2a_js_rest", "A2A 1.0 HTTP+JSON (@a2a-js/sdk)", _A2A),
)


