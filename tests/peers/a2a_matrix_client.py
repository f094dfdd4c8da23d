"""The pair matrix's A2A client: the official a2a-sdk, every kind of one (front, back) pair.

    python a2a_matrix_client.py '{"url", "route", "binding", "dialect", "kinds": [...]}'

Each kind is one streamed task (SendStreamingMessage): a question (INPUT_REQUIRED) is
answered by the next message on the task, by option kind when the options carry
kinds, else by label (`{"selected": [...], "text"?}` as a data part); a cancel is
CancelTask after the first artifact chunk. Prints `{kind: {"events": [...], "error"?}}`
(each event as the SDK parsed it; tests/matrix/fold_a2a.py reads them).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a_client import Ctx, d, error


def _whole(value: Any) -> Any:
    """a2a-sdk parses a data part into a protobuf Struct, whose numbers are all doubles, so
    any a2a-sdk client reads the bridge's 42 as 42.0. The wire carries 42
    (tests/test_e2e_a2a_fidelity.py reads the raw bytes; the @a2a-js columns see it too),
    so a whole double is read back as the integer it was."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def _answer(question: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    data = next((p["data"] for p in (question.get("parts") or []) if isinstance(p.get("data"), dict)), {})
    options = data.get("options") or []
    by_kind = [o["id"] for o in options if answer.get("option_kind") and o.get("kind") == answer["option_kind"]]
    if by_kind:
        return {"selected": by_kind[:1]}
    labels = list(answer.get("selected") or ([answer["label"]] if answer.get("label") else []))
    out: dict[str, Any] = {"selected": labels}
    if answer.get("text"):
        out["text"] = answer["text"]
    return out


async def run_kind(ctx: Ctx, kind: dict[str, Any]) -> dict[str, Any]:
    client = await ctx.client(streaming=True)
    events: list[dict[str, Any]] = []
    message = ctx.message(kind["prompt"])
    cancel: asyncio.Task[Any] | None = None
    for _round in range(4):
        waiting = None
        async for ev in client.send_message(pb.SendMessageRequest(message=message)):
            e = _whole(d(ev))
            events.append(e)
            task_id = (e.get("task") or e.get("statusUpdate") or e.get("artifactUpdate") or {}).get("taskId") or e.get("task", {}).get("id")
            if kind.get("cancel") and cancel is None and "artifactUpdate" in e:
                cancel = asyncio.ensure_future(client.cancel_task(pb.CancelTaskRequest(id=task_id)))
            status = (e.get("statusUpdate") or e.get("task") or {}).get("status") or {}
            if status.get("state") == "TASK_STATE_INPUT_REQUIRED":
                waiting = (task_id, status.get("message") or {})
        if waiting is None or not kind.get("answer"):
            break
        message = ctx.message(task_id=waiting[0], data=_answer(waiting[1], kind["answer"]))
    out: dict[str, Any] = {"events": events}
    if cancel is not None:
        try:
            out["cancel"] = d(await cancel)
        except Exception as exc:  # noqa: BLE001 - reported, the test decides
            out["cancel"] = error(exc)
    return out


async def main() -> None:
    opts = json.loads(sys.argv[1])
    ctx = Ctx(opts)
    results: dict[str, Any] = {}
    for kind in opts["kinds"]:
        try:
            results[kind["name"]] = await asyncio.wait_for(run_kind(ctx, kind), opts.get("timeout_s", 60))
        except Exception as exc:  # noqa: BLE001 - reported, the test decides
            results[kind["name"]] = {"events": [], "error": error(exc)}
    await ctx.http.aclose()
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main())
