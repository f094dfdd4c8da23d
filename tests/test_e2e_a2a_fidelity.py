"""End to end: what an A2A client sends and an A2A agent says crosses the bridge unchanged.

One daemon, one a2a-sdk agent (tests/peers/a2a_agent.py, its own process) behind the
A2A back, the demo back beside it, and the A2A front driven with raw httpx so the
test reads the wire as written (an SDK client would parse 42 and 42.0 alike). The
agent's `/_test/log` says what reached it.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import trio

from daemon_support import base_config, start_daemon
from test_e2e_a2a_back import run_agent

V10 = {"A2A-Version": "1.0"}
DATA = {"key": "value", "count": 42}


def rpc(method: str, params: Any, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def call(h: httpx.AsyncClient, route: str, method: str, params: Any, headers: dict[str, str] = V10) -> dict[str, Any]:
    r = await h.post(f"/a2a/{route}", json=rpc(method, params), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def sse(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(ln.removeprefix("data: ")) for ln in lines if ln.startswith("data: ")]


async def test_data_progress_ids_history_and_subscribe_cross_the_bridge_as_sent(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    with trio.fail_after(90):
        async with run_agent(tmp_path, "--mode", "both") as agent:
            routes = {
                "research": {"back": {"kind": "a2a", "url": agent.url}, "cancel_grace_s": 2, "question_timeout_s": 0.5},
                "typo": {"back": {"kind": "a2a", "url": f"{agent.url}/nothing"}, "cancel_grace_s": 2},
                "demo": {"back": {"kind": "demo", "chunk_delay_s": 0.0}, "cancel_grace_s": 2},
            }
            config = base_config(tmp_path, routes, daemon={"shutdown_grace_s": 1}, default_route="demo", a2a={"max_subscribers_per_task": 1})
            async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                # 3, 8: a data artifact, and the client's own message id, metadata and extensions
                sent = {"messageId": "client-abc", "role": "ROLE_USER", "parts": [{"text": "data: please"}],
                        "metadata": {"trace": "t-1"}, "extensions": ["https://example.com/ext/v1"]}  # fmt: skip
                r = await h.post("/a2a/research", json=rpc("SendMessage", {"message": sent}), headers=V10)
                data_raw = r.text
                data_task = r.json()["result"]["task"]
                got03 = (await h.post("/a2a/research", json=rpc("tasks/get", {"id": data_task["id"]}))).json()["result"]
                got_rest = (await h.get(f"/a2a/research/tasks/{data_task['id']}", headers=V10)).json()
                agent_log = await agent.log()

                # 4: the agent's WORKING status message is a status update, not reply text
                body = rpc("SendStreamingMessage", {"message": {"messageId": "client-hello", "role": "ROLE_USER", "parts": [{"text": "hello world"}]}})
                async with h.stream("POST", "/a2a/research", json=body, headers=V10) as resp:
                    hello = sse([ln async for ln in resp.aiter_lines()])

                # 11: a url whose card is missing fails with the URL tried, never the host's root card
                typo = await call(h, "typo", "SendMessage", {"message": {"messageId": "t-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})

                # 5, 6, 9: GET .../tasks/{id}:subscribe on a task waiting for an answer sees it through to the end
                asked = {"messageId": "client-ask", "role": "ROLE_USER", "parts": [{"text": "ask: note"}], "metadata": {"k": [1, 2]}}
                task = (await call(h, "demo", "SendMessage", {"message": asked}))["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
                subscribed: list[dict[str, Any]] = []
                first = trio.Event()

                async def subscribe() -> None:
                    async with h.stream("GET", f"/a2a/demo/tasks/{task['id']}:subscribe", headers=V10) as resp:
                        assert resp.status_code == 200, await resp.aread()
                        async for ln in resp.aiter_lines():
                            if ln.startswith("data: "):
                                subscribed.append(json.loads(ln.removeprefix("data: ")))
                                first.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(subscribe)
                    await first.wait()
                    # 1: one subscriber per task here ([a2a] max_subscribers_per_task): a second is refused
                    over_rpc = await call(h, "demo", "SubscribeToTask", {"id": task["id"]})
                    over_rest = await h.get(f"/a2a/demo/tasks/{task['id']}:subscribe", headers=V10)
                    answer = {"messageId": "client-answer", "role": "ROLE_USER", "taskId": task["id"], "parts": [{"text": "allow"}]}
                    done = (await call(h, "demo", "SendMessage", {"message": answer}))["result"]["task"]
                history = (await call(h, "demo", "GetTask", {"id": task["id"]}))["result"]["history"]
                old_path = await h.get(f"/a2a/demo/v1/tasks/{task['id']}:subscribe")

                # 1: a subscriber waiting on an interrupted task ends cleanly when the daemon stops (0.3: final)
                # (the agent's question goes unanswered: the turn ends interrupted, the task waits)
                ask = {"messageId": "client-ask-2", "role": "ROLE_USER", "parts": [{"text": "askfree: go on?"}]}
                waiting = (await call(h, "research", "SendMessage", {"message": ask}))["result"]["task"]
                at_stop: list[dict[str, Any]] = []
                async with h.stream("POST", "/a2a/research", json=rpc("tasks/resubscribe", {"id": waiting["id"]})) as resp:
                    async for ln in resp.aiter_lines():
                        if ln.startswith("data: "):
                            at_stop.append(json.loads(ln.removeprefix("data: "))["result"])
                            if len(at_stop) > 1 and at_stop[-1].get("final") and len([e for e in at_stop if e.get("final")]) == 1:
                                d.signal(signal.SIGTERM)  # the turn ended interrupted: the stream waits for the next
                exit_code = await d.wait()

    # 3: a data part, 42 an integer, in 1.0 (JSON-RPC and HTTP+JSON) and 0.3
    (art,) = data_task["artifacts"]
    assert art["parts"] == [{"data": DATA}] and re.search(r'"count":42[,}]', data_raw) and "42.0" not in data_raw
    assert got03["artifacts"][0]["parts"] == [{"kind": "data", "data": DATA}]
    assert got_rest["artifacts"][0]["parts"] == [{"data": DATA}]
    # 8: what the agent received is the client's message id, metadata and extensions
    (to_agent,) = [c["body"]["params"]["message"] for c in agent_log if isinstance(c["body"], dict) and c["body"].get("method") == "SendStreamingMessage"
                   and c["body"]["params"]["message"]["parts"][0].get("text") == "data: please"]  # fmt: skip
    assert to_agent["messageId"] == "client-abc"
    assert to_agent["metadata"] == {"trace": "t-1"} and to_agent["extensions"] == ["https://example.com/ext/v1"]
    assert data_task["history"][0] == {**sent, "contextId": data_task["contextId"], "taskId": data_task["id"]}
    # 11: card fetches say the version they speak
    cards = [c for c in agent_log if c["path"] == "/.well-known/agent-card.json"]
    assert cards and all(c["headers"].get("a2a-version") == "1.0" for c in cards)
    assert all(c["path"] != "/nothing/.well-known/agent-card.json" or c["headers"].get("a2a-version") for c in agent_log)

    # 4: "Working on hello. " is a WORKING status message; the response artifact is only the reply
    working = [e["result"]["statusUpdate"]["status"] for e in hello if "statusUpdate" in e["result"]]
    assert any(st["state"] == "TASK_STATE_WORKING" and st.get("message", {}).get("parts") == [{"text": "Working on hello. "}]
               and st["message"]["role"] == "ROLE_AGENT" for st in working), working  # fmt: skip
    reply = "".join(p.get("text", "") for e in hello if "artifactUpdate" in e["result"] for p in e["result"]["artifactUpdate"]["artifact"]["parts"])
    assert reply == "You said: hello world"

    # 11
    failed = typo["result"]["task"]["status"]
    why = failed["message"]["parts"][0]["text"]
    assert failed["state"] == "TASK_STATE_FAILED" and "/nothing/.well-known/agent-card.json" in why and "404" in why, failed

    # 5, 6: the subscriber saw the snapshot, the work after the answer, and the end
    assert "task" in subscribed[0] and subscribed[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    states = [e["statusUpdate"]["status"]["state"] for e in subscribed if "statusUpdate" in e]
    assert "TASK_STATE_WORKING" in states and states[-1] == "TASK_STATE_COMPLETED"
    assert any("artifactUpdate" in e for e in subscribed)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert old_path.status_code != 404 and "ID:subscribe" not in old_path.text  # 0.3 path: SubscribeToTask (of a finished task)
    assert "unknown task" not in old_path.text

    # 1: over the bound, -32603 saying which (A2A has no resource-limit error), HTTP+JSON 503;
    # at the stop, the waiting stream got its task's status (final in 0.3) and its end
    assert over_rpc["error"]["code"] == -32603 and "max_subscribers_per_task" in over_rpc["error"]["message"], over_rpc
    assert over_rest.status_code == 503 and "max_subscribers_per_task" in over_rest.text, over_rest.text
    ended = [e["status"]["state"] for e in at_stop if e.get("final")]
    assert at_stop[0]["kind"] == "task" and ended == ["input-required", "input-required"], at_stop
    assert exit_code == 0

    # 9: the client's messages as sent, and the question between them, in order
    assert [m["messageId"] for m in history if m["role"] == "ROLE_USER"] == ["client-ask", "client-answer"]
    assert history[0]["parts"] == asked["parts"] and history[0]["metadata"] == {"k": [1, 2]}
    users = [i for i, m in enumerate(history) if m["role"] == "ROLE_USER"]
    between = history[users[0] + 1 : users[1]]
    assert any(m["role"] == "ROLE_AGENT" and m["parts"][0].get("text", "").startswith("Edit notes.txt") for m in between), history
    assert history[users[1]]["parts"] == [{"text": "allow"}]
