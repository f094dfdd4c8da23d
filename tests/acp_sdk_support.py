"""Running the official ACP Python SDK as an editor of `agent-bridge acp ROUTE`, and reading its report.

`run_sdk_client` runs `tests/peers/acp_sdk_client.py` (one named scenario, one bridge
process) and returns its JSON report; the helpers read it: the wire (exact bytes,
exact order) and the SDK's parsed models (the SDK silently drops list items that do
not validate, so "the SDK saw the same thing" is a schema check of its own).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

CLIENT = Path(__file__).resolve().parent / "peers" / "acp_sdk_client.py"


async def run_sdk_client(
    scenario: str, *, bridge: list[str], env: dict[str, str], cwd: str, log: Path, **options: Any
) -> dict[str, Any]:
    """One SDK client process running `scenario` against the bridge command `bridge`."""
    opts = {"cwd": cwd, "stderr": str(log), **options}
    with trio.fail_after(60):
        proc = await trio.run_process(
            [sys.executable, str(CLIENT), scenario, json.dumps(opts), *bridge],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=cwd,
        )
    bridge_log = log.read_text(errors="replace") if log.exists() else ""
    where = f"\n--- client stderr:\n{proc.stderr.decode(errors='replace')}\n--- bridge stderr:\n{bridge_log}"
    assert proc.returncode == 0, f"SDK client exited {proc.returncode}{where}"
    report: dict[str, Any] = json.loads(proc.stdout)
    assert "crash" not in report, f"{report['crash']}{where}"
    # Leaving the SDK's context closes the bridge's stdin: it must exit by itself, cleanly.
    assert report["bridge_returncode"] == 0, where
    report["bridge_log"] = bridge_log
    return report


# -- reading a report ----------------------------------------------------------------------


def ok(report: dict[str, Any], name: str) -> Any:
    entry = report["results"][name]
    assert "result" in entry, f"{name} failed: {entry}"
    return entry["result"]


def err(report: dict[str, Any], name: str) -> dict[str, Any]:
    entry = report["results"][name]
    assert "error" in entry, f"{name} should have failed, got {entry}"
    return entry["error"]


def incoming(report: dict[str, Any], method: str) -> list[tuple[int, dict[str, Any]]]:
    """(wire index, message) of every message the bridge sent with `method`."""
    return [(i, w["msg"]) for i, w in enumerate(report["wire"]) if w["dir"] == "in" and w["msg"].get("method") == method]


def wire_updates(report: dict[str, Any], session_id: str, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """The `update` of every session/update for `session_id`, in wire order, within [start, stop)."""
    stop = len(report["wire"]) if stop is None else stop
    return [
        m["params"]["update"]
        for i, m in incoming(report, "session/update")
        if start <= i < stop and m["params"]["sessionId"] == session_id
    ]


def request_index(report: dict[str, Any], method: str, nth: int = 0) -> tuple[int, Any]:
    """(wire index, id) of the nth request we sent with `method`."""
    found = [
        (i, w["msg"]["id"])
        for i, w in enumerate(report["wire"])
        if w["dir"] == "out" and w["msg"].get("method") == method and "id" in w["msg"]
    ]
    return found[nth]


def response_index(report: dict[str, Any], request_id: Any) -> int:
    for i, w in enumerate(report["wire"]):
        m = w["msg"]
        if w["dir"] == "in" and "method" not in m and m.get("id") == request_id:
            return i
    raise AssertionError(f"no response to request {request_id}")


def turn_span(report: dict[str, Any], nth: int = 0) -> tuple[int, int]:
    """Wire indices of the nth session/prompt request and of its response."""
    i, rid = request_index(report, "session/prompt", nth)
    return i, response_index(report, rid)


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


def text(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"].get("text", "") for u in updates if u["sessionUpdate"] == kind)


def parent_of(update: dict[str, Any]) -> str | None:
    return ((update.get("_meta") or {}).get("agentBridge") or {}).get("parentToolCallId")


def assert_sdk_saw_everything(report: dict[str, Any], *, tolerate: tuple[str, ...] = ()) -> None:
    """The SDK parsed every update the bridge sent, dropped nothing, and logged no error."""
    log = [line for line in report["sdk_log"] if not any(t in line for t in tolerate)]
    assert log == [], log
    sent = [(m["params"]["sessionId"], m["params"]["update"]) for _, m in incoming(report, "session/update")]
    parsed = [(u["sessionId"], u["update"]) for u in report["updates"]]
    assert len(parsed) == len(sent)
    # Lists the SDK validates item by item (and silently drops on error) must survive whole.
    for (_, wire), (_, sdk) in zip(sent, parsed, strict=True):
        assert wire["sessionUpdate"] == sdk["sessionUpdate"]
        for key in ("entries", "availableCommands", "configOptions", "content"):
            if isinstance(wire.get(key), list):
                assert len(sdk.get(key, [])) == len(wire[key]), (key, wire, sdk)
