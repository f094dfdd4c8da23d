"""End to end: `[limits]` reached and answered on every front of a real `agent-bridge serve`.

One daemon, two demo routes: `limited` runs one turn at a time (`max_concurrent_turns = 1`)
and `rpm` starts one turn a minute (`requests_per_minute = 1`). A `slow` demo turn,
started through the REST API (its 202 means the slot is held), keeps `limited` busy
while every front tries another turn and is refused its protocol's way:

- A2A JSON-RPC (a2a 1.0): a JSON-RPC error carrying a google.rpc ErrorInfo
  (RATE_LIMIT_EXCEEDED, retryAfterSeconds) and a RetryInfo;
- A2A HTTP+JSON: 429 with `Retry-After` and a google.rpc.Status RESOURCE_EXHAUSTED;
- REST (`POST /api/sessions/{id}/prompt`): 429 with `Retry-After`;
- /ws: a `system:error` frame with code `rate_limited` and `detail.retryAfter`;
- MCP `tools/call` (the official `mcp` client): a JSON-RPC error -32005 with `data.retryAfter`;
- ACP `session/prompt` through `agent-bridge acp --connect`: error -32005 with `data.retryAfter`;

and `/metrics` counts each refusal by route, reason and front. Stopping the slow turn
(chat:stop, its chat:end awaited) frees the slot: the next ACP prompt runs.

Per caller: two callers signed in by a test issuer (real JWTs, checked by the daemon) on
a route with `per_identity_concurrent_turns = 1`; one's held slot refuses only its own
next turn.
"""

from __future__ import annotations

import json
import re
import subprocess

from pathlib import Path

import httpx
import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from trio_websocket import open_websocket_url

from daemon_support import AcpClient, base_config, start_daemon

from tests.issuer_support import AUDIENCE, running_issuer


def _metric(text: str, route: str, reason: str, front: str) -> float:
    m = re.search(
        rf'^agent_bridge_turns_refused_total\{{front="{front}",reason="{reason}",route="{route}"\}} (\S+)$', text, re.M
    )
    return float(m.group(1)) if m else 0.0


async def _ws_frame(ws: object, event: str) -> dict:
    while True:
        frame = json.loads(await ws.get_message())  # type: ignore[attr-defined]
        if frame["event"] == event:
            return frame  # type: ignore[no-any-return]


async def test_limits_on_every_front(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    routes = {
        "limited": {"back": {"kind": "demo", "chunk_delay_s": 0.0, "slow_duration_s": 600}, "limits": {"max_concurrent_turns": 1}},
        "rpm": {"back": {"kind": "demo", "chunk_delay_s": 0.0}, "limits": {"requests_per_minute": 1, "burst": 1}},
    }
    config = base_config(tmp_path, routes)
    async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        with trio.fail_after(90):
            # The slot: a slow turn on `limited`, admitted once its prompt is answered 202.
            held = (await h.post("/api/sessions", json={"route": "limited"})).json()["session_id"]
            r = await h.post(f"/api/sessions/{held}/prompt", json={"text": "slow: hold the slot"})
            assert r.status_code == 202, r.text
            ws_url = d.url.replace("http://", "ws://") + "/ws"
            async with open_websocket_url(ws_url) as ws:
                await ws.send_message(json.dumps({"event": "session:subscribe", "data": {"session_id": held}}))
                await _ws_frame(ws, "session:subscribed")

                # A2A JSON-RPC: HTTP 200, a JSON-RPC error with ErrorInfo and RetryInfo.
                msg = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
                rpc = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": msg}}
                r = await h.post("/a2a/limited", json=rpc, headers={"A2A-Version": "1.0"})
                assert r.status_code == 200, r.text
                err = r.json()["error"]
                assert err["code"] == -32603 and "max_concurrent_turns" in err["message"], err
                info, retry = err["data"]
                assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" and info["reason"] == "RATE_LIMIT_EXCEEDED"
                assert info["metadata"] == {"retryAfterSeconds": "1", "limit": "concurrent_turns", "scope": "route"}
                assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}

                # A2A HTTP+JSON: 429, Retry-After, google.rpc.Status.
                r = await h.post("/a2a/limited/message:send", json={"message": {**msg, "messageId": "m2"}}, headers={"A2A-Version": "1.0"})
                assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                status = r.json()["error"]
                assert status["code"] == 429 and status["status"] == "RESOURCE_EXHAUSTED"
                assert status["details"][0]["reason"] == "RATE_LIMIT_EXCEEDED"

                # REST: 429, Retry-After.
                other = (await h.post("/api/sessions", json={"route": "limited"})).json()["session_id"]
                r = await h.post(f"/api/sessions/{other}/prompt", json={"text": "hello"})
                assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                assert r.json()["retryAfter"] == 1 and r.json()["limit"] == "concurrent_turns"

                # /ws: system:error rate_limited.
                await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": other, "message": "hello"}}))
                frame = await _ws_frame(ws, "system:error")
                assert frame["data"]["code"] == "rate_limited", frame
                assert frame["data"]["detail"]["retryAfter"] == 1 and frame["data"]["detail"]["route"] == "limited"

                # MCP tools/call: a JSON-RPC error the client can back off on.
                async with Client(d.url + "/mcp", mode="legacy", cache=None) as mcp:
                    with pytest.raises(MCPError) as caught:
                        await mcp.call_tool("limited", {"prompt": "hello"})
                assert caught.value.code == -32005 and caught.value.data["retryAfter"] == 1, caught.value

                # ACP through `agent-bridge acp --connect`: session/prompt's error.
                shim = [*bridge_exe, "acp", "limited", "--connect", str(d.acp_socket)]
                proc = await trio.lowlevel.open_process(shim, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env)
                try:
                    acp = AcpClient(proc.stdout, proc.stdin)  # type: ignore[arg-type]
                    async with acp.running():
                        await acp.init()
                        sid = await acp.new(str(tmp_path))
                        answer = await acp.response(await acp.prompt(sid, "hello"))
                        assert answer["error"]["code"] == -32005 and answer["error"]["data"]["retryAfter"] == 1, answer

                        # The slow turn stops: its slot is free once its chat:end is out.
                        await ws.send_message(json.dumps({"event": "chat:stop", "data": {"session_id": held}}))
                        end = await _ws_frame(ws, "chat:end")
                        assert end["data"]["session_id"] == held
                        answer = await acp.response(await acp.prompt(sid, "hello"))
                        assert answer.get("result") == {"stopReason": "end_turn"}, answer
                finally:
                    proc.terminate()
                    await proc.wait()

            # One turn a minute on `rpm`: the second is refused for about a minute.
            body = {"message": {**msg, "messageId": "m3"}}
            r = await h.post("/a2a/rpm/message:send", json=body, headers={"A2A-Version": "1.0"})
            assert r.status_code == 200, r.text
            r = await h.post("/a2a/rpm/message:send", json={"message": {**msg, "messageId": "m4"}}, headers={"A2A-Version": "1.0"})
            assert r.status_code == 429 and 55 <= int(r.headers["retry-after"]) <= 60, (r.headers, r.text)
            assert r.json()["error"]["details"][0]["metadata"]["limit"] == "requests_per_minute"

            status, text = await d.get("/metrics")
            metrics = text.decode()
            for front, n in (("a2a", 2), ("rest", 1), ("ws", 1), ("mcp", 1), ("acp", 1)):
                assert _metric(metrics, "limited", "route_concurrent_turns", front) == n, (front, metrics[-3000:])
            assert _metric(metrics, "rpm", "route_requests_per_minute", "a2a") == 1
            assert re.search(r'^agent_bridge_turns_running\{route="limited"\} 0\.0$', metrics, re.M), metrics



async def test_per_identity_limits_count_each_issuer_caller_apart(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    # Two callers signed in by one issuer (real JWTs, checked by the daemon): alice's slow
    # turn holds her one slot on `team`, so her next turn is refused as hers (scope
    # "identity"), while bob's turn on the same route runs; the refusal is counted.
    routes = {"team": {"back": {"kind": "demo", "chunk_delay_s": 0.0, "slow_duration_s": 600}, "limits": {"per_identity_concurrent_turns": 1}}}
    with running_issuer() as issuer:
        config = base_config(tmp_path, routes, auth={"issuers": [{"issuer": issuer.url, "audience": AUDIENCE}]})
        alice = {"Authorization": f"Bearer {issuer.mint('alice')}"}
        bob = {"Authorization": f"Bearer {issuer.mint('bob')}"}
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
            with trio.fail_after(60):
                held = (await h.post("/api/sessions", json={"route": "team"}, headers=alice)).json()["session_id"]
                r = await h.post(f"/api/sessions/{held}/prompt", json={"text": "slow: hold alice's slot"}, headers=alice)
                assert r.status_code == 202, r.text

                again = (await h.post("/api/sessions", json={"route": "team"}, headers=alice)).json()["session_id"]
                r = await h.post(f"/api/sessions/{again}/prompt", json={"text": "hello"}, headers=alice)
                assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                assert r.json()["limit"] == "concurrent_turns" and r.json()["scope"] == "identity", r.json()

                msg = {"messageId": "b1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
                r = await h.post("/a2a/team/message:send", json={"message": msg}, headers={**bob, "A2A-Version": "1.0"})
                assert r.status_code == 200 and r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text

                metrics = (await h.get("/metrics")).text
                assert _metric(metrics, "team", "identity_concurrent_turns", "rest") == 1.0, metrics
