"""The matrix's own back rows: the demo agent, and the chat back to a second agent-bridge (bridge → bridge).

`ROWS` is these plus `PEER_ROWS` (tests/matrix/peer_rows.py): every row gets one route
in the daemon under test, named after it, whose body its `start()` yields.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.daemon_support import base_config, demo_route, start_daemon
from tests.matrix.fronts import data_as_text, progress_as_thought
from tests.matrix.peer_rows import PEER_ROWS
from tests.matrix.rows import BackRow, Carry, Degraded, Full

__all__ = ["ChatWsRow", "DemoRow", "ROWS", "bridge_env"]

SLOW_S = 60.0  # `slow:` runs this long: a cancel always lands before it ends


def bridge_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BRIDGE_")}
    env["XDG_STATE_HOME"] = str(tmp / "xdg")
    return env


def bridge_exe() -> list[str]:
    return [str(Path(sys.executable).with_name("agent-bridge"))]


class DemoRow:
    name = "demo"
    title = "`demo` (built-in scripted agent)"
    carries: dict[str, Carry] = {}

    @contextlib.asynccontextmanager
    async def start(self, tmp: Path) -> AsyncIterator[str]:
        yield f'back = {{ kind = "demo", chunk_delay_s = 0.0, slow_duration_s = {SLOW_S} }}\n'


class ChatWsRow:
    """A second agent-bridge serving the demo, reached over its /ws (`dialect = "ws"`)."""

    name = "chat_ws"
    title = '`chat` `dialect = "ws"` (another agent-bridge\'s `/ws`, serving the demo)'
    carries: dict[str, Carry] = {
        # Tool kinds, locations, raw output and question kinds cross as the chat stream's
        # `agentBridge` extensions, which a Blade-style client ignores.
        "tool": Full("kinds, locations and raw output in the tool call's `agentBridge` extension"),
        "permission_allow_diff": Full("option ids and kinds and the tool call in AskUserQuestion's `agentBridge` extension"),
        "data": Degraded("the chat stream has no data item: JSON text", data_as_text),
        "progress": Degraded("the chat stream has no status item: a thought", progress_as_thought),
    }

    @contextlib.asynccontextmanager
    async def start(self, tmp: Path) -> AsyncIterator[str]:
        home = tmp / "chained"
        home.mkdir(exist_ok=True)
        config = base_config(home, {"demo": demo_route(slow_duration_s=SLOW_S)})
        async with start_daemon(bridge_exe(), home, bridge_env(home), config, name="chained") as peer:
            url = peer.url.replace("http://", "ws://") + "/ws"
            yield f'back = {{ kind = "chat", url = "{url}", session_params = {{ route = "demo" }} }}\ncancel_grace_s = 3\n'


ROWS: list[BackRow] = [DemoRow(), ChatWsRow(), *PEER_ROWS]

