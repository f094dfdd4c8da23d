"""The matrix's back rows that run a third-party agent: a test peer started with
`--matrix` (or its matrix module), speaking the demo's words in its own protocol.

- `acp_sdk`: an ACP agent on the official Python SDK (tests/peers/acp_agent_matrix.py),
  spawned by the ACP back per session;
- `a2a_sdk`: an A2A agent on a2a-sdk 1.3 (tests/peers/a2a_agent.py --matrix);
- `chat_sio`: the Blade-style Socket.IO server (tests/peers/socketio_server.py --matrix);
- `a2a_js`: an A2A agent on @a2a-js/sdk (tests/peers/a2a_js_agent/agent.mjs, node).

Each row's `carries` is what its protocol can say of each kind (ACP schema; a2a.proto;
Blade `api/chat-flow.md`), not what the bridge manages today: a kind the bridge loses
but could keep stays Full.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import msgspec
import trio

from tests.matrix.kinds import COLOURS, KINDS, PERMISSION, Option, Seen
from tests.matrix.rows import BackRow, Carry, Degraded, Full
from tests.daemon_support import serve_peer
from tests.npm_support import node_exe, npm_ci

PEERS = Path(__file__).resolve().parents[1] / "peers"
A2A_JS = PEERS / "a2a_js_agent"


class PeerRow(msgspec.Struct, frozen=True):
    name: str
    title: str
    carries: dict[str, Carry]
    starter: Callable[[Path], AbstractAsyncContextManager[str]]

    def start(self, tmp: Path) -> AbstractAsyncContextManager[str]:
        return self.starter(tmp)


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- what each protocol keeps of a kind ---------------------------------------------------


def _seen(**changes: object) -> Callable[[Seen], Seen]:
    return lambda s: msgspec.structs.replace(s, **changes)


def _and(*fns: Callable[[Seen], Seen]) -> Callable[[Seen], Seen]:
    def both(s: Seen) -> Seen:
        for fn in fns:
            s = fn(s)
        return s

    return both


def _indexed(asked: object) -> object:
    """A question whose options are known by their index (Blade's AskUserQuestion)."""
    options = tuple(Option(str(i), o.label, o.kind) for i, o in enumerate(asked.options))  # type: ignore[attr-defined]
    return msgspec.structs.replace(asked, options=options)  # type: ignore[type-var]


def _no_usage(table: dict[str, Carry], reason: str) -> dict[str, Carry]:
    """Every kind whose answer reports usage loses it (A2A has no usage report)."""
    out = dict(table)
    for kind in KINDS:
        if not kind.expect.usage:
            continue
        c = out.get(kind.name, Full())
        if isinstance(c, Full):
            out[kind.name] = Degraded(reason, _seen(usage=False))
        elif isinstance(c, Degraded):
            out[kind.name] = Degraded(f"{c.reason} {reason}", _and(c.shows, _seen(usage=False)))
    return out


_ACP_PERMISSION = Degraded(
    "ACP's `session/request_permission` has no question text: a front that shows one shows the tool call's title.",
    _seen(asked=(msgspec.structs.replace(PERMISSION, prompt="Edit notes.txt"),)),
)
ACP_CARRIES: dict[str, Carry] = {
    "permission_allow_diff": _ACP_PERMISSION,
    "permission_reject": _ACP_PERMISSION,
    "question": Full("`elicitation/create` (form): a multi-select field and a free-text field"),
    "subagent": Full("ACP v1 has no sub-agents: updates carry `_meta.agentBridge.parentToolCallId`"),
    "data": Full("an embedded `application/json` resource"),
    "progress": Full("a thought chunk marked `_meta.agentBridge.progress`"),
    "failure": Full("a JSON-RPC error answering `session/prompt`"),
}

_A2A_NO_TOOLS = "A2A has no tool calls: the permission is an INPUT_REQUIRED about no tool call, and no diff arrives."
A2A_CARRIES: dict[str, Carry] = _no_usage(
    {
        "thought": Degraded("A2A has no reasoning part: the thoughts stay with the agent.", _seen(thought="")),
        "plan": Degraded("A2A has no plan: only the answer arrives.", _seen(plan=None)),
        "tool": Degraded("A2A has no tool calls: only the answer arrives.", _seen(tools=())),
        "permission_allow_diff": Degraded(_A2A_NO_TOOLS, _seen(tools=(), asked=(msgspec.structs.replace(PERMISSION, tool=None),))),
        "permission_reject": Degraded(_A2A_NO_TOOLS, _seen(tools=(), asked=(msgspec.structs.replace(PERMISSION, tool=None),))),
        "subagent": Degraded("A2A has no sub-agents: only the parent's answer arrives.", _seen(tools=(), thought="", children={})),
        "stop_max_tokens": Degraded("A2A has no max-tokens state: the task completes.", _seen(stop="end_turn")),
        "stop_max_turns": Degraded("A2A has no max-turns state: the task completes.", _seen(stop="end_turn")),
        "question": Full("INPUT_REQUIRED with `{options, multiSelect, allowText}` data"),
        "progress": Full("a WORKING status message"),
        "stop_refusal": Full("TASK_STATE_REJECTED with its message"),
    },
    "A2A reports no token usage.",
)

CHAT_CARRIES: dict[str, Carry] = {
    "plan": Full("a `plan_status` block"),
    "permission_allow_diff": Degraded(
        "Blade's AskUserQuestion has labels only, named by index and bound to no tool call: kinds come from the labels.",
        _seen(asked=(msgspec.structs.replace(_indexed(PERMISSION), tool=None),)),  # type: ignore[type-var]
    ),
    "permission_reject": Degraded(
        "Blade's AskUserQuestion has labels only, named by index and bound to no tool call: kinds come from the labels; "
        "a tool result that is not text (the rejected edit's `{rejected: true}`) is shown as its JSON text.",
        _and(
            _seen(asked=(msgspec.structs.replace(_indexed(PERMISSION), tool=None),)),  # type: ignore[type-var]
            lambda s: msgspec.structs.replace(s, tools=tuple(msgspec.structs.replace(t, text='{"rejected":true}') for t in s.tools)),
        ),
    ),
    "question": Degraded("Blade's AskUserQuestion options have no ids: they are answered by index.", _seen(asked=(_indexed(COLOURS),))),
    "subagent": Full("a fork's child turn (`parent_fork_tool_call_id`)"),
    "data": Full("the headless result's `output` on `chat:end`"),
    "files": Degraded("Blade has no link block: only the image (`image_url`) arrives.", _seen(files=(("image", "image/png"),))),
    "progress": Degraded("Blade has no status item: progress arrives as thinking.", _seen(progress="", thought="Working on it.")),
    "stop_max_tokens": Degraded("Blade's `chat:end` has no max-tokens finish reason: the turn completes.", _seen(stop="end_turn")),
    "stop_refusal": Degraded("Blade's `chat:end` has no refusal: the refusal reads as an answer.", _seen(stop="end_turn", usage=True)),
    "failure": Full("`system:error`, then `chat:end` failed"),
    "cancel": Full("`chat:stop`, then `chat:end` interrupted"),
}


# -- the peers ------------------------------------------------------------------------


@asynccontextmanager
async def _acp_sdk(tmp: Path) -> AsyncIterator[str]:
    command = ", ".join(_toml(x) for x in (sys.executable, str(PEERS / "acp_agent_matrix.py")))
    yield f'back = {{ kind = "acp", command = [{command}] }}\n'


@asynccontextmanager
async def _a2a_sdk(tmp: Path) -> AsyncIterator[str]:
    async with serve_peer([sys.executable, str(PEERS / "a2a_agent.py"), "--matrix"], tmp / "a2a_sdk.log") as port:
        yield f'back = {{ kind = "a2a", url = "http://127.0.0.1:{port}" }}\n'


@asynccontextmanager
async def _chat_sio(tmp: Path) -> AsyncIterator[str]:
    async with serve_peer([sys.executable, str(PEERS / "socketio_server.py"), "--matrix"], tmp / "chat_sio.log") as port:
        yield f'back = {{ kind = "chat", url = "ws://127.0.0.1:{port}/socket.io/", dialect = "socketio" }}\n'


@asynccontextmanager
async def _a2a_js(tmp: Path) -> AsyncIterator[str]:
    node = node_exe()
    await trio.to_thread.run_sync(npm_ci, A2A_JS)
    async with serve_peer([node, str(A2A_JS / "agent.mjs")], tmp / "a2a_js.log") as port:
        yield f'back = {{ kind = "a2a", url = "http://127.0.0.1:{port}" }}\n'


PEER_ROWS: list[BackRow] = [
    PeerRow("acp_sdk", "ACP agent on the official Python SDK (agent-client-protocol)", ACP_CARRIES, _acp_sdk),
    PeerRow("a2a_sdk", "A2A agent on a2a-sdk 1.3 (Python)", A2A_CARRIES, _a2a_sdk),
    PeerRow("chat_sio", "Blade-style chat server (python-socketio)", CHAT_CARRIES, _chat_sio),
    PeerRow("a2a_js", "A2A agent on @a2a-js/sdk (node)", A2A_CARRIES, _a2a_js),
]
