"""End to end: the official a2a-sdk client (its own process) → `agent-bridge serve` → the demo back or an ACP agent.

The client is tests/peers/a2a_client.py (a2a-sdk 1.3, `ClientFactory`), run once per
(dialect, binding): A2A 1.0 and 0.3, JSON-RPC and HTTP+JSON, streaming and blocking.
It reports what the SDK parsed; the tests check that. Raw httpx covers what an SDK
never sends (bad JSON, wrong versions, content types, missing tokens) and the SSE
details. Push notifications go to a webhook served here. Every test starts its own
daemon (`[server] listen = "127.0.0.1:0"`) and has a `trio.fail_after` ceiling.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon_support import Daemon, base_config, start_daemon

PEERS = Path(__file__).resolve().parent / "peers"
CLIENT = PEERS / "a2a_client.py"
ACP_AGENT = PEERS / "acp_agent_sdk.py"
TOKEN = "a2a-t0ken-never-logged"
V10 = {"A2A-Version": "1.0"}
COMBOS = [("1.0", "JSONRPC"), ("1.0", "HTTP+JSON"), ("0.3", "JSONRPC"), ("0.3", "HTTP+JSON")]


def routes(**extra: Any) -> dict[str, Any]:
    return {
        "demo": {"title": "Demo agent", "description": "The scripted demo", "version": "2.1.0",
                 "back": {"kind": "demo", "chunk_delay_s": 0.0, "slow_duration_s": 1.5}, "cancel_grace_s": 2},
        "coder": {"back": {"kind": "acp", "command": [sys.executable, str(ACP_AGENT)]}, "cancel_grace_s": 3},
        "secured": {"back": {"kind": "demo", "chunk_delay_s": 0.0},
                    "a2a": {"token_env": "A2A_FRONT_TOKEN", "extended_card": True,
                            "extended_skills": [{"id": "secret", "name": "Secret", "description": "for callers with the token"}]}},
        **extra,
    }  # fmt: skip


@contextlib.asynccontextmanager
async def daemon(bridge_exe: list[str], tmp_path: Path, env: dict[str, str], *, a2a: dict[str, Any] | None = None,
                 name: str = "daemon", extra_routes: dict[str, Any] | None = None, server: dict[str, Any] | None = None,
                 ) -> AsyncIterator[Daemon]:  # fmt: skip
    config = base_config(tmp_path, routes(**(extra_routes or {})), daemon={"shutdown_grace_s": 1}, default_route="demo", server=server or {})
    config["a2a"] = {"push_allowed_hosts": ["127.0.0.1"], "push_backoff_s": 0.05, **(a2a or {})}
    async with start_daemon(bridge_exe, tmp_path, env, config, name=name, extra_env={"A2A_FRONT_TOKEN": TOKEN}) as d:
        yield d


async def sdk_client(d: Daemon, dialect: str, binding: str, scenarios: list[tuple[str, dict[str, Any]]], *,
                     route: str = "demo", token: str | None = None) -> dict[str, Any]:  # fmt: skip
    opts = {"url": d.url, "route": route, "binding": binding, "dialect": dialect, "token": token, "scenarios": scenarios, "timeout_s": 30}
    proc = await trio.run_process([sys.executable, str(CLIENT), json.dumps(opts)], capture_stdout=True, capture_stderr=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace") + d.log_text()[-3000:]
    results: dict[str, Any] = json.loads(proc.stdout)["results"]
    crashed = {k: v["traceback"] for k, v in results.items() if isinstance(v, dict) and "traceback" in v}
    assert not crashed, f"{crashed}\n--- daemon log:\n{d.log_text()[-3000:]}"
    return results


def rpc(method: str, params: Any, rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


_ids = iter(range(1, 10**9))


def message(text: str, **more: Any) -> dict[str, Any]:
    return {"message": {"messageId": f"test-{next(_ids)}", "role": "ROLE_USER", "parts": [{"text": text}], **more}}


async def call(h: httpx.AsyncClient, route: str, method: str, params: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    r = await h.post(f"/a2a/{route}", json=rpc(method, params), headers=V10 if headers is None else headers)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def state_of(task: dict[str, Any]) -> str:
    return task["status"]["state"]  # type: ignore[no-any-return]


class Webhook:
    """A tiny HTTP server recording POSTs; the first `fail` get 503 (to see retries)."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.requests: list[dict[str, Any]] = []
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._conn, listeners)

    async def _conn(self, stream: trio.SocketStream) -> None:
        buf = b""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                size = int(headers.get("content-length", "0"))
                while len(buf) < size:
                    buf += await stream.receive_some(65536)
                body, buf = buf[:size], buf[size:]
                self.requests.append({"line": lines[0], "headers": headers, "body": json.loads(body)})
                status = "503 Service Unavailable" if len(self.requests) <= self.fail else "200 OK"
                await stream.send_all(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n".encode())

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def wait_for(self, pred: Any, timeout: float = 15) -> None:
        with trio.fail_after(timeout):
            while not pred(self.requests):
                await trio.sleep(0.02)


# -- the official SDK client, every dialect and binding --------------------------------------------


@pytest.mark.parametrize(("dialect", "binding"), COMBOS, ids=[f"{d}-{b}" for d, b in COMBOS])
async def test_sdk_client_against_the_demo_back(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], dialect: str, binding: str) -> None:
    with trio.fail_after(120):
        async with daemon(bridge_exe, tmp_path, clean_env) as d, trio.open_nursery() as nursery:
            hook = Webhook(fail=1)
            await nursery.start(hook.serve)
            r = await sdk_client(d, dialect, binding, [
                ("card", {}),
                ("send", {"text": "hello there"}),
                ("send", {"as": "stream", "streaming": True, "text": "think: tool: plan: hi"}),
                ("ask", {"text": "ask: note", "answer": "allow"}),
                ("ask", {"as": "ask_stream", "streaming": True, "text": "ask: note", "answer": "Reject"}),
                ("ask", {"as": "choose", "text": "choose: x", "answer": None, "answer_data": {"selected": ["red", "Blue"], "text": "teal"}}),
                ("cancel", {"text": "slow: long"}),
                ("tasks", {}),
                ("subscribe", {"text": "slow: x"}),
                ("push", {"text": "slow: x", "webhook": hook.url()}),
                ("errors", {}),
            ])  # fmt: skip
            nursery.cancel_scope.cancel()

    # The card: a 1.0 card for a 1.0 client; the merged card (0.3 fields too) for others.
    card = r["card"]
    v10 = card["v10"]
    assert v10["name"] == "Demo agent" and v10["version"] == "2.1.0" and v10["description"] == "The scripted demo"
    assert [(i["protocolBinding"], i["protocolVersion"]) for i in v10["supportedInterfaces"]] == [
        ("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3"), ("HTTP+JSON", "0.3")]  # fmt: skip
    assert all(i["url"] == f"{d.url}/a2a/demo" for i in v10["supportedInterfaces"])
    assert v10["capabilities"] == {"streaming": True, "pushNotifications": True}
    assert {"plan", "ask", "choose"} <= {s["id"] for s in v10["skills"]}
    assert "url" not in card["v10_raw_keys"] and {"url", "preferredTransport", "protocolVersion", "supportedInterfaces"} <= set(card["legacy_keys"])
    assert card["v03"]["protocolVersion"] == "0.3.0" and card["v03"]["url"] == f"{d.url}/a2a/demo"
    assert {i["transport"] for i in card["v03"]["additionalInterfaces"]} == {"JSONRPC", "HTTP+JSON"}
    assert card["legacy_as_10"]["supportedInterfaces"] == v10["supportedInterfaces"]
    h = card["v10_headers"]
    assert h["etag"].startswith('W/"') and h["cache-control"] == "public, max-age=300" and h["vary"] == "A2A-Version"
    assert card["revalidated"] == 304

    # Blocking send: one completed task, the reply as a "response" artifact, the prompt in history.
    send = r["send"]
    assert send["kinds"] == ["task"] and send["state"] == "TASK_STATE_COMPLETED"
    assert send["text"] == "You said: hello there"
    assert [a["name"] for a in send["artifacts"].values()] == ["response"]
    assert send["history"][0]["role"] == "ROLE_USER" and send["history"][0]["parts"][0]["text"] == "hello there"

    # Streaming: the task first, then updates; thoughts, tools and plans as status messages,
    # the reply as artifact chunks (append, lastChunk), the stream ends at COMPLETED.
    stream = r["stream"]
    assert stream["kinds"][0] == "task" and stream["kinds"][-1] == "statusUpdate"
    assert stream["state"] == "TASK_STATE_COMPLETED" and stream["text"] == "You said: hi"
    assert all(a["last"] for a in stream["artifacts"].values())
    kinds = [u["statusUpdate"]["status"]["message"]["metadata"]["agentBridge"]["kind"] for u in stream["events"]
             if "statusUpdate" in u and "message" in u["statusUpdate"]["status"]]  # fmt: skip
    assert {"thought", "tool_call", "plan"} <= set(kinds)
    chunks = [e["artifactUpdate"] for e in stream["events"] if "artifactUpdate" in e]
    assert not chunks[0].get("append") and all(c.get("append") for c in chunks[1:])

    # A question: INPUT_REQUIRED with its options as data; the next message answers it.
    for name, answer in (("ask", "Edited notes.txt. "), ("ask_stream", "Understood, I left notes.txt alone. ")):
        first, second = r[name]["first"], r[name]["second"]
        assert first["state"] == "TASK_STATE_INPUT_REQUIRED"
        parts = first["status_message"]["parts"]
        assert parts[0]["text"] == "Edit notes.txt?"
        assert [(o["id"], o["kind"]) for o in parts[1]["data"]["options"]] == [
            ("allow", "allow_once"), ("allow_always", "allow_always"), ("reject", "reject_once"), ("reject_always", "reject_always")
        ]  # fmt: skip
        assert second["task_id"] == first["task_id"] and second["state"] == "TASK_STATE_COMPLETED"
        assert second["text"].startswith(answer)
    choose = r["choose"]
    assert choose["first"]["status_message"]["parts"][1]["data"]["multiSelect"] is True
    assert choose["second"]["text"].startswith("You chose: Red, Blue, teal.")

    # Cancel: the back's cancel, then CANCELED; a second cancel is TaskNotCancelable.
    cancel = r["cancel"]
    assert cancel["started"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert state_of(cancel["canceled"]) == state_of(cancel["got"]) == "TASK_STATE_CANCELED"
    assert cancel["again"]["error"] == "TaskNotCancelableError"

    # GetTask with historyLength; follow-ups in one context; ListTasks filters and pages (1.0).
    tasks = r["tasks"]
    assert tasks["two"]["context_id"] == tasks["one"]["context_id"] and tasks["two"]["task_id"] != tasks["one"]["task_id"]
    assert len(tasks["get"]["history"]) == 2 and len(tasks["get_h1"]["history"]) == 1
    assert tasks["get"]["artifacts"][0]["parts"][0]["text"] == "You said: first"
    if dialect == "1.0":
        listed = tasks["list"]
        assert listed["totalSize"] == 2 and [t["id"] for t in listed["tasks"]] == [tasks["two"]["task_id"], tasks["one"]["task_id"]]
        assert all("artifacts" not in t for t in listed["tasks"])
        page1, page2 = tasks["pages"]
        assert page1["nextPageToken"] and page1["tasks"][0]["artifacts"] and not page2.get("nextPageToken")
        assert {page1["tasks"][0]["id"], page2["tasks"][0]["id"]} == {tasks["one"]["task_id"], tasks["two"]["task_id"]}
        assert all(state_of(t) == "TASK_STATE_COMPLETED" for t in tasks["completed"]["tasks"])

    # Late subscribers: the task first, then the same events in the same order; one that left
    # early did not cancel it; subscribing to a finished task is UnsupportedOperation.
    sub = r["subscribe"]
    assert sub["a"] == sub["b"] and "task" in sub["a"][0] and len(sub["a"]) > 3
    assert state_of(sub["final"]) == "TASK_STATE_COMPLETED" and len(sub["quitter"]) == 2
    assert sub["summary"]["text"].startswith("tick")
    assert sub["terminal"]["error"] == "UnsupportedOperationError"

    # Push: configs made, read, listed and deleted; a webhook off the allow-list refused.
    push = r["push"]
    assert push["created"]["id"] == "hook1" and push["got"] == push["created"]
    assert push["refused"]["error"] == "InvalidParamsError"
    if "listed" in push:
        assert [c["id"] for c in push["listed"]["configs"]] == ["hook1"]
        assert push["after_delete"] == {} or push["after_delete"].get("configs") in (None, [])

    # Errors the SDK maps to its typed exceptions.
    e = r["errors"]
    assert e["unknown_task"]["error"] == "TaskNotFoundError"
    assert e["not_cancelable"]["error"] == "TaskNotCancelableError"
    assert e["to_terminal"]["error"] == "UnsupportedOperationError"
    assert e["unknown_context"]["error"] == "TaskNotFoundError"
    assert e["subscribe_terminal"]["error"] == "UnsupportedOperationError"


async def test_push_notifications_are_delivered_with_retries_and_auth(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with daemon(bridge_exe, tmp_path, clean_env) as d, trio.open_nursery() as nursery, httpx.AsyncClient(base_url=d.url, timeout=30) as h:
            hook = Webhook(fail=2)
            await nursery.start(hook.serve)
            # A config given with the message: told of every state change from WORKING on.
            push = {"url": hook.url(), "token": "tok", "authentication": {"scheme": "Bearer", "credentials": "hook-secret"}}
            params = {**message("ask: x"), "configuration": {"taskPushNotificationConfig": push}}
            task = (await call(h, "demo", "SendMessage", params))["result"]["task"]
            assert state_of(task) == "TASK_STATE_INPUT_REQUIRED"
            await call(h, "demo", "SendMessage", message("allow", taskId=task["id"]))
            states = lambda reqs: [q["body"]["statusUpdate"]["status"]["state"] for q in reqs[2:]]  # noqa: E731
            await hook.wait_for(lambda reqs: "TASK_STATE_COMPLETED" in states(reqs))
            nursery.cancel_scope.cancel()
    # The first two POSTs got 503 and were retried: at least once, in order.
    assert len(hook.requests) >= 5
    assert hook.requests[0]["body"] == hook.requests[2]["body"]
    assert states(hook.requests) == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    first = hook.requests[0]
    assert first["headers"]["content-type"] == "application/a2a+json"
    assert first["headers"]["authorization"] == "Bearer hook-secret" and first["headers"]["x-a2a-notification-token"] == "tok"
    assert first["body"]["statusUpdate"]["taskId"] == task["id"]


async def test_queued_push_notifications_are_delivered_before_the_daemon_exits(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """SIGTERM cancels a running task; its CANCELED, queued behind retries, still reaches the webhook."""
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            hook = Webhook(fail=3)  # 503 three times: the queue is still waiting when the stop begins
            await nursery.start(hook.serve)
            # The retries take ~2 s; the stop gives what is queued up to graceful_timeout_s.
            async with daemon(bridge_exe, tmp_path, clean_env, a2a={"push_backoff_s": 0.3}, server={"graceful_timeout_s": 20}) as d:
                async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                    config = {"returnImmediately": True, "taskPushNotificationConfig": {"url": hook.url()}}
                    task = (await call(h, "demo", "SendMessage", {**message("slow: x"), "configuration": config}))["result"]["task"]
                await hook.wait_for(lambda reqs: len(reqs) >= 1)
                d.signal(signal.SIGTERM)
                assert await d.wait(timeout=30) == 0, d.log_text()
                assert "not delivered" not in d.log_text()
            nursery.cancel_scope.cancel()
    states = [q["body"]["statusUpdate"]["status"]["state"] for q in hook.requests[3:]]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_CANCELED"], [q["body"] for q in hook.requests]
    assert {q["body"]["statusUpdate"]["taskId"] for q in hook.requests} == {task["id"]}


# -- an ACP agent as the back -------------------------------------------------------------------


@pytest.mark.parametrize(("dialect", "binding"), COMBOS, ids=[f"{d}-{b}" for d, b in COMBOS])
async def test_sdk_client_against_an_acp_agent(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], dialect: str, binding: str) -> None:
    with trio.fail_after(120):
        async with daemon(bridge_exe, tmp_path, clean_env) as d, trio.open_nursery() as nursery:
            hook = Webhook()
            await nursery.start(hook.serve)
            r = await sdk_client(d, dialect, binding, [
                ("send", {"text": "think tool text:3"}),
                ("send", {"as": "stream", "streaming": True, "text": "text:2"}),
                ("send", {"as": "progress", "streaming": True, "text": "think tool text:1"}),
                ("ask", {"text": "ask", "answer": "allow"}),
                ("cancel", {"text": "slow", "after_s": 0.5}),
                ("tasks", {}),
                ("subscribe", {"text": "slow", "after_s": 0.3, "cancel_after_s": 0.6}),
                ("push", {"text": "ask", "answer": "reject", "webhook": hook.url()}),
            ], route="coder")  # fmt: skip
            await hook.wait_for(lambda reqs: any("completed" in json.dumps(q["body"]).lower() for q in reqs))
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                # Follow-ups in a context reach the same agent session: it remembers.
                first = (await call(h, "coder", "SendMessage", message("remember:apple")))["result"]["task"]
                again = (await call(h, "coder", "SendMessage", message("recall", contextId=first["contextId"])))["result"]["task"]
            nursery.cancel_scope.cancel()
    send = r["send"]
    assert send["state"] == "TASK_STATE_COMPLETED" and send["text"] == "c0 c1 c2 "
    assert r["stream"]["state"] == "TASK_STATE_COMPLETED" and r["stream"]["text"] == "c0 c1 "
    progress = r["progress"]
    kinds = [u["statusUpdate"]["status"]["message"]["metadata"]["agentBridge"]["kind"] for u in progress["events"]
             if "statusUpdate" in u and "message" in u["statusUpdate"]["status"]]  # fmt: skip
    assert {"thought", "tool_call"} <= set(kinds) and progress["text"] == "c0 "
    ask = r["ask"]
    assert ask["first"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    data = ask["first"]["status_message"]["parts"][1]["data"]
    assert data["kind"] == "permission" and [o["kind"] for o in data["options"]] == ["allow_once", "allow_always", "reject_once"]
    assert ask["second"]["state"] == "TASK_STATE_COMPLETED" and "permission=allow" in ask["second"]["text"]
    assert state_of(r["cancel"]["canceled"]) == "TASK_STATE_CANCELED"
    tasks = r["tasks"]
    assert tasks["get"]["artifacts"][0]["parts"][0]["text"] == "first "  # the agent echoes words it does not know
    assert len(tasks["get_h1"]["history"]) == 1
    if dialect == "1.0":
        assert tasks["list"]["totalSize"] == 2
    sub = r["subscribe"]
    assert sub["a"] == sub["b"] and "task" in sub["a"][0] and len(sub["quitter"]) == 2
    assert state_of(sub["final"]) == "TASK_STATE_CANCELED" and sub["summary"]["text"].startswith("tick")
    push = r["push"]
    assert push["answered"]["state"] == "TASK_STATE_COMPLETED" and "permission=reject" in push["answered"]["text"]
    # Every change after the config was made (the agent may have asked before or after).
    if dialect == "1.0":
        pushed = [q["body"]["statusUpdate"]["status"]["state"] for q in hook.requests]
        assert pushed in (["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"])
    else:  # a config made in 0.3 gets the 0.3 Task
        pushed = [q["body"]["status"]["state"] for q in hook.requests]
        assert pushed in (["working", "completed"], ["input-required", "working", "completed"])
        assert hook.requests[-1]["body"]["kind"] == "task" and hook.requests[-1]["headers"]["content-type"] == "application/json"
    assert again["contextId"] == first["contextId"]
    assert again["artifacts"][0]["parts"][0]["text"] == "memory=apple"


# -- the store: after the turn ended and after a restart ------------------------------------------


async def test_tasks_outlive_a_restart(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(120):
        async with daemon(bridge_exe, tmp_path, clean_env, name="first") as d:
            before = await sdk_client(d, "1.0", "JSONRPC", [("tasks", {})])
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                waiting = (await call(h, "demo", "SendMessage", message("ask: x")))["result"]["task"]
                assert state_of(waiting) == "TASK_STATE_INPUT_REQUIRED"
            d.signal(signal.SIGTERM)
            assert await d.wait() == 0
        async with daemon(bridge_exe, tmp_path, clean_env, name="second") as d:
            one, two = before["tasks"]["one"], before["tasks"]["two"]
            after = await sdk_client(d, "1.0", "HTTP+JSON", [("errors", {})])
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                got = (await call(h, "demo", "GetTask", {"id": one["task_id"]}))["result"]
                listed = (await call(h, "demo", "ListTasks", {"contextId": one["context_id"], "includeArtifacts": True}))["result"]
                waited = (await call(h, "demo", "GetTask", {"id": waiting["id"]}))["result"]
                sub = await h.post("/a2a/demo", json=rpc("SubscribeToTask", {"id": one["task_id"]}), headers=V10)
                follow = (await call(h, "demo", "SendMessage", message("later", contextId=one["context_id"])))["result"]["task"]
                relisted = (await call(h, "demo", "ListTasks", {"contextId": one["context_id"]}))["result"]
                # The route's completed tasks (every context), two a page, by the page tokens.
                pages, token = [], ""
                while not pages or token:
                    params = {"status": "TASK_STATE_COMPLETED", "pageSize": 2, **({"pageToken": token} if token else {})}
                    pages.append((await call(h, "demo", "ListTasks", params))["result"])
                    token = pages[-1]["nextPageToken"]
                canceled = (await call(h, "demo", "ListTasks", {"status": "TASK_STATE_CANCELED"}))["result"]
    # GetTask after the restart: the same task, its artifacts and history, from the store.
    assert got["id"] == one["task_id"] and state_of(got) == "TASK_STATE_COMPLETED"
    assert got["artifacts"] == before["tasks"]["get"]["artifacts"]
    assert got["history"] == before["tasks"]["get"]["history"]
    assert [t["id"] for t in listed["tasks"]] == [two["task_id"], one["task_id"]] and listed["totalSize"] == 2
    assert listed["tasks"][0]["artifacts"][0]["parts"][0]["text"] == "You said: second"
    # A task waiting on a question when the daemon stopped was cancelled by the shutdown.
    assert state_of(waited) == "TASK_STATE_CANCELED"
    # Subscribing to a finished task is UnsupportedOperationError (-32004), as a JSON-RPC answer.
    assert sub.json()["error"]["code"] == -32004
    # The context goes on after the restart.
    assert follow["contextId"] == one["context_id"] and state_of(follow) == "TASK_STATE_COMPLETED"
    assert relisted["totalSize"] == 3
    # Newest status first across contexts: the follow-up, the errors scenario's task, then two and one.
    completed = [task["id"] for page in pages for task in page["tasks"]]
    assert [p["totalSize"] for p in pages] == [4, 4] and len(completed) == 4
    assert completed[0] == follow["id"] and completed[2:] == [two["task_id"], one["task_id"]]
    assert [t["id"] for t in canceled["tasks"]] == [waiting["id"]] and canceled["totalSize"] == 1
    assert after["errors"]["unknown_task"]["error"] == "TaskNotFoundError"


# -- what an SDK never sends: every error path, raw ---------------------------------------------


def error_of(body: dict[str, Any]) -> tuple[int, str]:
    err = body["error"]
    return err["code"], err["data"][0]["reason"]


async def test_json_rpc_errors(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with daemon(bridge_exe, tmp_path, clean_env, a2a={"push_allowed_hosts": []}, server={"max_body_bytes": 16384}) as d, \
                httpx.AsyncClient(base_url=d.url, timeout=30) as h:  # fmt: skip
            async def raw(body: bytes | str, headers: dict[str, str] | None = None, route: str = "demo") -> httpx.Response:
                return await h.post(f"/a2a/{route}", content=body, headers={"content-type": "application/json", **(V10 if headers is None else headers)})

            done = (await call(h, "demo", "SendMessage", message("hello")))["result"]["task"]
            cases: dict[str, tuple[int, str]] = {}
            cases["parse"] = error_of((await raw(b"{not json")).json())
            cases["batch"] = error_of((await raw(b"[]")).json())
            cases["no_jsonrpc"] = error_of((await raw(json.dumps({"id": 1, "method": "GetTask", "params": {}}))).json())
            # JSON-RPC 2.0 §5: an Invalid Request is answered with its id when it can be read.
            ids = [(await raw(body)).json()["id"] for body in (
                b'{"jsonrpc": "1.0", "id": "abc", "method": "GetTask", "params": {}}', b'{"jsonrpc": "2.0", "id": 42}',
                b'{"jsonrpc": "2.0", "id": 7, "method": 5}', b'{"jsonrpc": "2.0", "id": [1], "method": "GetTask"}',
            )]  # fmt: skip
            cases["unknown_method"] = error_of((await call(h, "demo", "tasks/explode", {})))
            cases["invalid_params"] = error_of(await call(h, "demo", "SendMessage", {"message": 5}))
            cases["no_parts"] = error_of(await call(h, "demo", "SendMessage", {"message": {"messageId": "x", "role": "ROLE_USER", "parts": []}}))
            cases["task_not_found"] = error_of(await call(h, "demo", "GetTask", {"id": "nope"}))
            cases["not_cancelable"] = error_of(await call(h, "demo", "CancelTask", {"id": done["id"]}))
            cases["push_not_supported"] = error_of(await call(h, "demo", "CreateTaskPushNotificationConfig", {"taskId": done["id"], "url": "http://127.0.0.1:9/x"}))
            cases["to_terminal"] = error_of(await call(h, "demo", "SendMessage", message("more", taskId=done["id"])))
            cases["output_modes"] = error_of(await call(h, "demo", "SendMessage", {**message("x"), "configuration": {"acceptedOutputModes": ["image/png"]}}))
            cases["no_extended_card"] = error_of(await call(h, "demo", "GetExtendedAgentCard", {}))
            cases["no_version"] = error_of((await raw(json.dumps(rpc("SendMessage", message("x"))), headers={})).json())
            cases["future_version"] = error_of((await raw(json.dumps(rpc("GetTask", {"id": "x"})), headers={"A2A-Version": "2.0"})).json())
            cases["old_method_new_version"] = error_of(await call(h, "demo", "message/send", {"message": {"messageId": "x", "role": "user", "parts": [{"kind": "text", "text": "x"}]}}))
            cases["history_length"] = error_of(await call(h, "demo", "GetTask", {"id": done["id"], "historyLength": -1}))
            cases["page_size"] = error_of(await call(h, "demo", "ListTasks", {"pageSize": 1000}))
            cases["page_token"] = error_of(await call(h, "demo", "ListTasks", {"pageToken": "not-a-token"}))
            cases["bad_answer"] = error_of(await call(h, "demo", "SendMessage", message("purple", taskId=(await call(h, "demo", "SendMessage", message("ask: x")))["result"]["task"]["id"])))
            ctype = await h.post("/a2a/demo", content=json.dumps(rpc("GetTask", {"id": "x"})), headers={"content-type": "text/plain", **V10})
            big = await raw(b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "' + b"x" * 20_000 + b'"}}')
            unknown_route = await h.post("/a2a/nowhere", json=rpc("GetTask", {"id": "x"}), headers=V10)
            # 0.3 asked without the header: answered in 0.3 shapes, errors too.
            old = (await raw(json.dumps(rpc("tasks/get", {"id": done["id"]})), headers={})).json()["result"]
    assert cases == {
        "parse": (-32700, "INVALID_REQUEST"),
        "batch": (-32600, "INVALID_REQUEST"),
        "no_jsonrpc": (-32600, "INVALID_REQUEST"),
        "unknown_method": (-32601, "METHOD_NOT_FOUND"),
        "invalid_params": (-32602, "INVALID_PARAMS"),
        "no_parts": (-32602, "INVALID_PARAMS"),
        "task_not_found": (-32001, "TASK_NOT_FOUND"),
        "not_cancelable": (-32002, "TASK_NOT_CANCELABLE"),
        "push_not_supported": (-32003, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        "to_terminal": (-32004, "UNSUPPORTED_OPERATION"),
        "output_modes": (-32005, "CONTENT_TYPE_NOT_SUPPORTED"),
        "no_extended_card": (-32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        "no_version": (-32009, "VERSION_NOT_SUPPORTED"),
        "future_version": (-32009, "VERSION_NOT_SUPPORTED"),
        "old_method_new_version": (-32009, "VERSION_NOT_SUPPORTED"),
        "history_length": (-32602, "INVALID_PARAMS"),
        "page_size": (-32602, "INVALID_PARAMS"),
        "page_token": (-32602, "INVALID_PARAMS"),
        "bad_answer": (-32602, "INVALID_PARAMS"),
    }
    assert ids == ["abc", 42, 7, None]
    assert ctype.status_code == 415 and error_of(ctype.json()) == (-32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert big.status_code == 413
    assert unknown_route.status_code == 404
    assert old["kind"] == "task" and old["status"]["state"] == "completed" and old["artifacts"][0]["parts"][0]["kind"] == "text"


async def test_http_json_errors_and_auth(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with daemon(bridge_exe, tmp_path, clean_env) as d, httpx.AsyncClient(base_url=d.url, timeout=30) as h:
            missing = await h.get("/a2a/demo/tasks/nope", headers=V10)
            parse = await h.post("/a2a/demo/message:send", content=b"{oops", headers={"content-type": "application/a2a+json", **V10})
            ctype = await h.post("/a2a/demo/message:send", content=b"x=1", headers={"content-type": "application/x-www-form-urlencoded", **V10})
            version = await h.post("/a2a/demo/message:send", json=message("hi"))
            wrong_path = await h.post("/a2a/demo/v1/message:send", json=message("hi"), headers=V10)
            old_missing = await h.get("/a2a/demo/v1/tasks/nope", headers={"A2A-Version": "0.3"})
            ok = await h.post("/a2a/demo/message:send", json=message("hi"), headers=V10)
            listed = await h.get("/a2a/demo/tasks", params={"pageSize": "x"}, headers=V10)
            # A route with a token: the card is public and says so; calls need the token.
            card = (await h.get("/a2a/secured/.well-known/agent-card.json", headers=V10)).json()
            no_token = await h.post("/a2a/secured", json=rpc("GetTask", {"id": "x"}), headers=V10)
            wrong = await h.post("/a2a/secured", json=rpc("GetTask", {"id": "x"}), headers={"Authorization": "Bearer nope", **V10})
            rest_wrong = await h.get("/a2a/secured/tasks", headers={"Authorization": "Bearer nope", **V10})
            right = await call(h, "secured", "SendMessage", message("hi"), headers={"Authorization": f"Bearer {TOKEN}", **V10})
            extended = await call(h, "secured", "GetExtendedAgentCard", {}, headers={"Authorization": f"Bearer {TOKEN}", **V10})
            root = await h.get("/.well-known/agent-card.json")
    assert missing.status_code == 404
    body = missing.json()["error"]
    assert body["status"] == "NOT_FOUND" and body["details"][0]["reason"] == "TASK_NOT_FOUND"
    assert body["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert parse.status_code == 400 and parse.json()["error"]["details"][0]["reason"] == "INVALID_REQUEST"
    assert ctype.status_code == 415 and ctype.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert version.status_code == 400 and version.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert wrong_path.status_code == 400 and wrong_path.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert old_missing.status_code == 404 and old_missing.json()["type"] == "TaskNotFoundError"
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/a2a+json"
    assert ok.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert listed.status_code == 400
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}] and card["capabilities"]["extendedAgentCard"] is True
    assert no_token.status_code == 401 and no_token.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 403 and rest_wrong.status_code == 403
    assert state_of(right["result"]["task"]) == "TASK_STATE_COMPLETED"
    assert "secret" in {s["id"] for s in extended["result"]["skills"]} and "secret" not in {s["id"] for s in card["skills"]}
    assert root.status_code == 200 and root.json()["url"] == f"{d.url}/a2a/demo"
    assert TOKEN not in d.log_text()


# -- SSE: headers, heartbeats, disconnects, slow clients ---------------------------------------


async def test_sse_stream_details(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with daemon(bridge_exe, tmp_path, clean_env, a2a={"heartbeat_s": 0.04, "stream_queue_max_events": 16}) as d, \
                httpx.AsyncClient(base_url=d.url, timeout=30) as h:  # fmt: skip
            body = rpc("SendStreamingMessage", message("slow: x"), rid="s-1")
            async with h.stream("POST", "/a2a/demo", json=body, headers=V10) as r:
                headers = dict(r.headers)
                lines: list[str] = []
                async for line in r.aiter_lines():
                    lines.append(line)
                    if sum(ln.startswith("data:") for ln in lines) >= 4:
                        break  # the client goes away mid-stream
            first = json.loads(lines[0].removeprefix("data: "))
            task_id = first["result"]["task"]["id"]
            await trio.sleep(2.0)  # the task goes on without its client: slow runs 1.5 s
            after = (await call(h, "demo", "GetTask", {"id": task_id}))["result"]
            # A client that does not read: its stream is dropped, the task completes.
            stream = await trio.open_tcp_stream("127.0.0.1", int(d.url.rsplit(":", 1)[1]))
            payload = json.dumps(rpc("SendStreamingMessage", message("bench:200000"))).encode()
            await stream.send_all(b"POST /a2a/demo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
                                  b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))  # fmt: skip
            await trio.sleep(1.5)
            listed = (await call(h, "demo", "ListTasks", {"pageSize": 1}))["result"]
            await stream.aclose()
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert first["id"] == "s-1" and first["result"]["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert ": keepalive" in lines
    assert state_of(after) == "TASK_STATE_COMPLETED"
    assert state_of(listed["tasks"][0]) == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_COMPLETED" in after["status"]["state"]


# -- contexts: parallel tasks, references, one bridge in front of another ---------------------------


async def test_parallel_tasks_and_references_in_one_context(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with daemon(bridge_exe, tmp_path, clean_env) as d, httpx.AsyncClient(base_url=d.url, timeout=30) as h:
            first = (await call(h, "coder", "SendMessage", message("text:1")))["result"]["task"]
            ctx = first["contextId"]
            slow = (await call(h, "coder", "SendMessage", {**message("slow", contextId=ctx), "configuration": {"returnImmediately": True}}))["result"]["task"]
            # The context's session is busy: this one runs beside it, in parallel, and is told
            # what the task it references answered (its agent did not see it).
            quick = (await call(h, "coder", "SendMessage", message("recall", contextId=ctx, referenceTaskIds=[first["id"]])))["result"]["task"]
            running = (await call(h, "coder", "GetTask", {"id": slow["id"]}))["result"]
            canceled = (await call(h, "coder", "CancelTask", {"id": slow["id"]}))["result"]
            listed = (await call(h, "coder", "ListTasks", {"contextId": ctx}))["result"]
            working = (await call(h, "coder", "ListTasks", {"contextId": ctx, "status": "TASK_STATE_WORKING"}))["result"]
    assert state_of(quick) == "TASK_STATE_COMPLETED" and quick["contextId"] == ctx
    assert state_of(running) == "TASK_STATE_WORKING"
    assert state_of(canceled) == "TASK_STATE_CANCELED"
    assert {t["id"] for t in listed["tasks"]} == {first["id"], slow["id"], quick["id"]}
    assert working["totalSize"] == 0
    assert quick["history"][0]["parts"] == [{"text": "recall"}] and quick["history"][0]["referenceTaskIds"] == [first["id"]]


async def test_one_bridge_fronts_another(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Client → bridge 2 (A2A front, A2A back) → bridge 1 (A2A front, demo back): a question
    asked by the demo crosses both bridges and the answer comes back."""
    for sub in ("one", "two"):
        (tmp_path / sub).mkdir()
    with trio.fail_after(90):
        async with daemon(bridge_exe, tmp_path / "one", clean_env, name="one") as one:
            far = {"chain": {"back": {"kind": "a2a", "url": f"{one.url}/a2a/demo"}, "cancel_grace_s": 2}}
            async with daemon(bridge_exe, tmp_path / "two", clean_env, name="two", extra_routes=far) as two:
                r = await sdk_client(two, "1.0", "JSONRPC", [
                    ("send", {"text": "hello"}),
                    ("ask", {"text": "ask: note", "answer": "Allow"}),
                    ("ask", {"as": "stream", "streaming": True, "text": "ask: note", "answer": "reject"}),
                ], route="chain")  # fmt: skip
    assert r["send"]["text"].endswith("You said: hello")
    first = r["ask"]["first"]
    assert first["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [o["label"] for o in first["status_message"]["parts"][1]["data"]["options"]] == ["Allow", "Always allow", "Reject", "Never allow"]
    assert "Edited notes.txt." in r["ask"]["second"]["text"] and r["ask"]["second"]["state"] == "TASK_STATE_COMPLETED"
    assert "left notes.txt alone" in r["stream"]["second"]["text"]
