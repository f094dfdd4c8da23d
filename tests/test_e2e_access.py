"""`[routes.NAME.access]` end to end, on a real `agent-bridge serve` with a local issuer.

alice (no group) owns her sessions; carol (no group) may not list, watch, use or
answer them on any front (REST, the canonical events API, /ws, A2A contexts and tasks,
MCP); bob (group "ops") may, as the rules say. A session opened by `agent-bridge acp
--connect` is owned by the test's Unix user (SO_PEERCRED), and the audit log names who
ran each turn on which front.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.daemon_support import ACP_SDK_CLIENT, Daemon, start_daemon, toml_head
from tests.test_chat_events_api import Sse
from tests.issuer_support import issuer_toml, running_issuer

CEILING_S = 120
_OPS = '[{ claim = "groups", contains = "ops" }]'


def _config(tmp_path: Path, issuer_text: str, extra: str = "") -> str:
    return toml_head(tmp_path) + f"""
[routes.team]
back = {{ kind = "demo", chunk_delay_s = 0 }}
[routes.team.access]
start = [{{ claim = "via", equals = "jwt" }}, {{ claim = "via", equals = "unix" }}]
list = {_OPS}
watch = {_OPS}
use = {_OPS}
answer = {_OPS}
{extra}
{issuer_text}
"""


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}


def _send(text: str, **ids: str) -> dict[str, Any]:
    msg = {"messageId": f"m{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}], **ids}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}}


async def _ws_subscribe(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", extra_headers=[("Authorization", f"Bearer {token}")]) as ws:
        await ws.send_message(json.dumps({"event": "session:subscribe", "data": {"session_id": sid}}))
        return json.loads(await ws.get_message())


async def _ws_send(d: Daemon, token: str, sid: str) -> dict[str, Any]:
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", extra_headers=[("Authorization", f"Bearer {token}")]) as ws:
        await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "hi"}}))
        while True:
            frame = json.loads(await ws.get_message())
            if frame["event"] in ("system:error", "chat:end"):
                return frame


async def test_one_identity_cannot_reach_anothers_sessions_on_any_front_and_a_group_can(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, clean_env, _config(tmp_path, issuer_toml(issuer))) as d:
            alice, carol, bob = issuer.mint("alice"), issuer.mint("carol"), issuer.mint("bob", groups=["ops"])
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                # -- REST and the canonical API.
                r = await h.post("/api/sessions", json={"route": "team"}, headers=_h(alice))
                assert r.status_code == 200, r.text
                sid = r.json()["session_id"]
                r = await h.post(f"/api/sessions/{sid}/prompt", json={"text": "mine"}, headers=_h(alice))
                assert r.status_code == 202, r.text
                listed = lambda r: [s["session_id"] for s in r.json()["sessions"]]  # noqa: E731
                assert sid in listed(await h.get("/api/sessions", headers=_h(alice)))
                assert sid not in listed(await h.get("/api/sessions", headers=_h(carol)))
                assert sid in listed(await h.get("/api/sessions", headers=_h(bob)))
                for method, path, body in (("GET", "", None), ("GET", "/messages", None), ("POST", "/prompt", {"text": "x"}),
                                           ("POST", "/cancel", {}), ("POST", "/answer", {"question_id": "q"}),
                                           ("DELETE", "", None)):  # fmt: skip
                    r = await h.request(method, f"/api/sessions/{sid}{path}", json=body, headers=_h(carol))
                    assert r.status_code == 404, (method, path, r.text)
                r = await h.get(f"/api/sessions/{sid}/events", params={"through": 0}, headers=_h(carol))
                assert r.status_code == 404, r.text
                r = await h.get(f"/api/sessions/{sid}/messages", headers=_h(bob))
                assert r.status_code == 200 and "mine" in r.text, r.text
                r = await h.get(f"/api/sessions/{sid}/events", params={"through": 0}, headers=_h(bob))
                assert r.status_code == 200 and "caught_up" in r.text, r.text

                # -- A question in alice's session: carol may not answer it, bob (ops) may.
                r = await h.post(f"/api/sessions/{sid}/prompt", json={"text": "ask: tidy"}, headers=_h(alice))
                assert r.status_code == 202, r.text
                async with h.stream("GET", f"/api/sessions/{sid}/events", headers=_h(alice)) as resp:
                    sse = Sse(resp)
                    asked = json.loads((await sse.until(lambda e: e.event == "question_asked"))[-1].data)["question"]
                    answer = {"question_id": asked["id"], "selected": ["allow"]}
                    r = await h.post(f"/api/sessions/{sid}/answer", json=answer, headers=_h(carol))
                    assert r.status_code == 404, r.text
                    r = await h.post(f"/api/sessions/{sid}/answer", json=answer, headers=_h(bob))
                    assert r.status_code == 200 and r.json() == {"answered": True}, r.text
                    await sse.until(lambda e: e.event == "turn_ended")

                # -- /ws: carol can neither watch nor send; bob can.
                frame = await _ws_subscribe(d, carol, sid)
                assert frame["event"] == "system:error" and frame["data"]["code"] == "not_found", frame
                frame = await _ws_send(d, carol, sid)
                assert frame["event"] == "system:error" and frame["data"]["code"] == "not_found", frame
                assert (await _ws_subscribe(d, bob, sid))["event"] == "session:subscribed"
                assert (await _ws_send(d, bob, sid))["data"]["status"] == "completed"

                # -- A2A: a context and its task.
                r = await h.post("/a2a/team", json=_send("a2a mine"), headers=_h(alice))
                task = r.json()["result"]["task"]
                ctx, task_id = task["contextId"], task["id"]
                r = await h.post("/a2a/team", json=_send("intrude", contextId=ctx), headers=_h(carol))
                assert "error" in r.json() and "unknown" in r.json()["error"]["message"], r.text
                get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
                r = await h.post("/a2a/team", json=get, headers=_h(carol))
                assert r.json()["error"]["code"] == -32001, r.text  # TaskNotFoundError
                r = await h.post("/a2a/team", json=get, headers=_h(bob))
                assert r.json()["result"]["id"] == task_id, r.text
                lst = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}}
                ids = lambda r: [t["id"] for t in r.json()["result"]["tasks"]]  # noqa: E731
                assert task_id not in ids(await h.post("/a2a/team", json=lst, headers=_h(carol)))
                assert task_id in ids(await h.post("/a2a/team", json=lst, headers=_h(alice)))
                r = await h.post("/a2a/team", json=_send("ops too", contextId=ctx), headers=_h(bob))
                assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text

            # -- MCP: carol cannot continue alice's conversation.
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async def tool(token: str, **args: Any) -> Any:
                async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
                    async with Client(streamable_http_client(d.url + "/mcp", http_client=http)) as client:
                        return await client.call_tool("team", {"prompt": "mcp", **args})

            mine = await tool(alice)
            assert not mine.is_error, mine
            msid = mine.structured_content["session_id"]
            theirs = await tool(carol, session_id=msid)
            assert theirs.is_error and "unknown session" in theirs.content[0].text, theirs
            assert not (await tool(bob, session_id=msid)).is_error
            # An MCP session is its opener's: another caller holding its id is told it does not exist.
            mcp_h = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                r = await h.post("/mcp", json=init, headers={**mcp_h, "Authorization": f"Bearer {alice}"})
                opened = {**mcp_h, "Mcp-Session-Id": r.headers["mcp-session-id"]}
                listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                r = await h.post("/mcp", json=listing, headers={**opened, "Authorization": f"Bearer {carol}"})
                assert r.status_code == 404 and "Session not found" in r.text, r.text
                r = await h.get("/mcp", headers={**opened, "Authorization": f"Bearer {carol}", "Last-Event-ID": "1"})
                assert r.status_code == 404, r.text
                r = await h.post("/mcp", json=listing, headers={**opened, "Authorization": f"Bearer {alice}"})
                assert r.status_code == 200 and "team" in r.text, r.text

            # -- ACP over the unix socket: owned by the Unix user of `agent-bridge acp --connect`.
            exe = Path(sys.executable).with_name("agent-bridge")
            shim = [str(exe), "acp", "team", "--connect", str(d.acp_socket)]
            opts = {"cwd": str(tmp_path), "timeout_s": 30}
            proc = await trio.run_process([sys.executable, str(ACP_SDK_CLIENT), "persist_write", json.dumps(opts), *shim],
                                          capture_stdout=True, capture_stderr=True, check=False, env=clean_env)  # fmt: skip
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
            report = json.loads(proc.stdout)
            assert report["results"]["prompt1"] == {"result": {"stopReason": "end_turn"}}, report["results"]
            acp_sid = report["session_id"]
            user = pwd.getpwuid(os.getuid()).pw_name
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                assert (await h.get(f"/api/sessions/{acp_sid}", headers=_h(alice))).status_code == 404
                assert (await h.get(f"/api/sessions/{acp_sid}", headers=_h(bob))).status_code == 200

        # The owners, as stored (checked once the daemon has stopped and flushed).
        db = sqlite3.connect(tmp_path / "state" / "bridge.sqlite3")
        owners = {sid: json.loads(meta).get("owner") for sid, meta in db.execute("SELECT session_id, meta FROM sessions")}
        assert owners[sid] == f"jwt:{issuer.url}:alice" and owners[msid] == f"jwt:{issuer.url}:alice"
        assert owners[acp_sid] == f"unix::{user}", owners
        # One audit line per turn: who, route, front, outcome; never the content.
        audit = [json.loads(line.split(": audit ", 1)[1]) for line in d.log_text().splitlines() if "bridge.audit" in line]
        assert {"who": f"jwt:{issuer.url}:alice", "route": "team", "front": "rest", "outcome": "end_turn"} in [
            {k: a[k] for k in ("who", "route", "front", "outcome")} for a in audit
        ], audit
        assert any(a["who"] == f"unix::{user}" and a["front"] == "acp" for a in audit), audit
        assert "mine" not in "".join(line for line in d.log_text().splitlines() if "bridge.audit" in line)


async def test_listings_page_total_and_count_only_what_each_identity_may_see_and_so_does_the_feed(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """Listings are filtered in the store: carol's pages are full although alice's newer
    sessions come first in the store, and `total`, `counts` and A2A `totalSize` are hers
    alone (nobody learns how many sessions others have). Her change feed hears nothing of
    alice's sessions, not even their deletion, and does hear of her own."""
    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        config = _config(tmp_path, issuer_toml(issuer)) + f"""
[routes.open]
back = {{ kind = "demo", chunk_delay_s = 0 }}

[routes.ops]
back = {{ kind = "demo", chunk_delay_s = 0 }}
[routes.ops.access]
start = {_OPS}
"""
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
            alice, carol, bob = issuer.mint("alice"), issuer.mint("carol"), issuer.mint("bob", groups=["ops"])

            async def create(token: str, route: str = "team") -> str:
                r = await h.post("/api/sessions", json={"route": route}, headers=_h(token))
                assert r.status_code == 200, r.text
                return str(r.json()["session_id"])

            carols = [await create(carol) for _ in range(3)]
            alices = [await create(alice) for _ in range(5)]  # newer: first in the store's order
            shared = await create(alice, "open")  # a route without rules: everyone's

            async def pages(token: str, limit: int) -> tuple[list[list[str]], set[int], dict[str, int]]:
                got: list[list[str]] = []
                totals: set[int] = set()
                offset = 0
                while True:
                    r = await h.get("/api/sessions", params={"limit": limit, "offset": offset, "counts": 1}, headers=_h(token))
                    assert r.status_code == 200, r.text
                    body = r.json()
                    totals.add(body["total"])
                    if not body["sessions"]:
                        return got, totals, body["counts"]["route"]
                    got.append([s["session_id"] for s in body["sessions"]])
                    offset += limit

            got, totals, routes = await pages(carol, 2)
            assert [len(p) for p in got] == [2, 2] and totals == {4}, (got, totals)  # full pages, her total
            assert sorted(sum(got, [])) == sorted([*carols, shared]) and routes == {"open": 1, "team": 3}
            got, totals, routes = await pages(alice, 4)
            assert [len(p) for p in got] == [4, 2] and totals == {6} and routes == {"open": 1, "team": 5}
            assert sorted(sum(got, [])) == sorted([*alices, shared]), got  # hers and the shared one, never carol's
            got, totals, routes = await pages(bob, 5)  # ops lists everyone's
            assert [len(p) for p in got] == [5, 4] and totals == {9} and routes == {"open": 1, "team": 8}

            # A2A ListTasks: the same, by each task's context owner.
            for token, n in ((carol, 1), (alice, 3)):
                for _ in range(n):
                    r = await h.post("/a2a/team", json=_send("task"), headers=_h(token))
                    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
            lst = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {"pageSize": 1}}
            res = (await h.post("/a2a/team", json=lst, headers=_h(carol))).json()["result"]
            assert (len(res["tasks"]), res["totalSize"], res.get("nextPageToken", "")) == (1, 1, ""), res
            lst["params"] = {"pageSize": 2}
            res = (await h.post("/a2a/team", json=lst, headers=_h(alice))).json()["result"]
            assert (len(res["tasks"]), res["totalSize"]) == (2, 3) and res["nextPageToken"], res
            ctx, task_id = res["tasks"][0]["contextId"], res["tasks"][0]["id"]
            lst["params"] = {"contextId": ctx}  # alice's context, asked by name
            res = (await h.post("/a2a/team", json=lst, headers=_h(carol))).json()["result"]
            assert (res["tasks"], res["totalSize"]) == ([], 0), res

            # Refusals say what an id nobody has gets: alice's context, on its route or through
            # another route's URL, and her task (never naming its context).
            async def error(path: str, body: dict[str, Any], mine: str) -> dict[str, Any]:
                r = await h.post(path, json=body, headers=_h(carol))
                err = r.json()["error"]
                return {**err, "message": err["message"].replace(mine, "ID")}

            nobody = "0" * 32
            unknown_ctx = await error("/a2a/team", _send("x", contextId=nobody), nobody)
            assert "ID" in unknown_ctx["message"], unknown_ctx
            for path in ("/a2a/team", "/a2a/open"):
                assert await error(path, _send("x", contextId=ctx), ctx) == unknown_ctx, path
            get = lambda tid: {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": tid}}  # noqa: E731
            unknown_task = await error("/a2a/team", get(nobody), nobody)
            assert await error("/a2a/team", get(task_id), task_id) == unknown_task and unknown_task["code"] == -32001
            referencing = lambda tid: _send("x", referenceTaskIds=[tid])  # noqa: E731
            unknown_ref = await error("/a2a/team", referencing(nobody), nobody)
            assert await error("/a2a/team", referencing(task_id), task_id) == unknown_ref and unknown_ref["code"] == -32001

            # Routes a caller may not use are not shown to it (the routes API, MCP tools).
            names = lambda r: {x["name"] for x in r.json()["routes"]}  # noqa: E731
            assert names(await h.get("/api/routes", headers=_h(carol))) == {"team", "open"}
            assert names(await h.get("/api/routes", headers=_h(bob))) == {"team", "open", "ops"}
            r = await h.post("/api/sessions", json={"route": "ops"}, headers=_h(carol))  # as for a route nobody has
            assert r.status_code == 404 and r.json()["detail"] == "no route named 'ops'; routes are ['open', 'team']", r.text
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client
            from mcp.shared.exceptions import MCPError

            for token, shown in ((carol, {"team", "open"}), (bob, {"team", "open", "ops"})):
                async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
                    async with Client(streamable_http_client(d.url + "/mcp", http_client=http)) as client:
                        assert {t.name for t in (await client.list_tools()).tools} == shown
                        if token == carol:  # as for a tool nobody has
                            with pytest.raises(MCPError, match="unknown tool 'ops'"):
                                await client.call_tool("ops", {"prompt": "x"})

            # The change feed: alice's session comes and goes unheard by carol; carol's own is heard.
            async with h.stream("GET", "/api/changes", headers=_h(carol)) as resp:
                assert resp.status_code == 200
                sse = Sse(resp)
                hers = await create(alice)
                r = await h.post(f"/api/sessions/{hers}/prompt", json={"text": "busy"}, headers=_h(alice))
                assert r.status_code == 202, r.text
                assert (await h.delete(f"/api/sessions/{hers}", headers=_h(alice))).status_code == 200
                own = await create(carol)
                assert (await h.delete(f"/api/sessions/{own}", headers=_h(carol))).status_code == 200
                heard = await sse.until(lambda e: e.event == "deleted" and json.loads(e.data)["session_id"] == own)
            said = b"".join(e.data if isinstance(e.data, bytes) else e.data.encode() for e in heard).decode()
            assert hers not in said and own in said, heard
            assert [e.event for e in heard if e.event == "reset"] == [], heard


async def test_mcp_over_stdio_is_the_user_who_started_it(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    """`agent-bridge mcp` over stdio is its Unix user, as `agent-bridge acp` is: a route
    whose rules let Unix users start sessions is its tool, and the session is theirs."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    config = tmp_path / "bridge.toml"
    config.write_text(
        '[routes.team]\nback = { kind = "demo", chunk_delay_s = 0 }\n'
        '[routes.team.access]\nstart = [{ claim = "via", equals = "unix" }]\n'
        '[routes.jwt_only]\nback = { kind = "demo", chunk_delay_s = 0 }\n'
        '[routes.jwt_only.access]\nstart = [{ claim = "via", equals = "jwt" }]\n'
    )
    params = StdioServerParameters(
        command=bridge_exe[0], args=[*bridge_exe[1:], "mcp", "--config", str(config), "--state-dir", str(tmp_path / "state")],
        env=clean_env,
    )
    with trio.fail_after(CEILING_S), (tmp_path / "mcp.log").open("w") as log:
        async with Client(stdio_client(params, errlog=log), mode="legacy", cache=None) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["team"]
            result = await client.call_tool("team", {"prompt": "hi"})
            assert not result.is_error, result
            sid = result.structured_content["session_id"]
    db = sqlite3.connect(tmp_path / "state" / "bridge.sqlite3")
    ((meta,),) = db.execute("SELECT meta FROM sessions WHERE session_id = ?", (sid,)).fetchall()
    assert json.loads(meta)["owner"] == f"unix::{pwd.getpwuid(os.getuid()).pw_name}"


async def test_a_ws_connection_ends_when_its_token_expires(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    """A `/ws` client let in by a JWT (its upgrade's header, or its first frame) is closed
    with 4401 once the token expires, and an SSE stream (events, change feed) ends, so a
    caller whose access was withdrawn at the issuer does not keep watching sessions on a
    connection opened before."""
    from trio_websocket import ConnectionClosed

    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        config = _config(tmp_path, issuer_toml(issuer) + "clock_skew_s = 0\n")
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            url = d.url.replace("http://", "ws://") + "/ws"
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                r = await h.post("/api/sessions", json={"route": "team"}, headers=_h(issuer.mint("alice")))
                sid = r.json()["session_id"]
            for by_header in (True, False):
                token = issuer.mint("alice", exp=int(time.time()) + 2)
                headers = [("Authorization", f"Bearer {token}")] if by_header else []
                async with open_websocket_url(url, extra_headers=headers) as ws:
                    first = {"event": "session:subscribe", "data": {"session_id": sid}}
                    if not by_header:
                        first["auth"] = {"token": token}
                    await ws.send_message(json.dumps(first))
                    assert json.loads(await ws.get_message())["event"] == "session:subscribed"
                    frames = []
                    try:
                        while True:
                            frames.append(json.loads(await ws.get_message()))
                    except ConnectionClosed as closed:
                        assert closed.reason.code == 4401, closed.reason
                    assert frames[-1]["data"]["code"] == "unauthorized" and "expired" in frames[-1]["data"]["message"], frames
            # The canonical events stream and the change feed end then too.
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                for path in (f"/api/sessions/{sid}/events", "/api/changes"):
                    token = issuer.mint("alice", exp=int(time.time()) + 2)
                    async with h.stream("GET", path, headers=_h(token)) as resp:
                        assert resp.status_code == 200
                        async for _ in resp.aiter_raw():  # pings and events, until the stream ends
                            pass


# A turn that outlives any short token: `slow` streams for a minute unless cancelled.
_LONG = '[routes.long]\nback = { kind = "demo", chunk_delay_s = 0, slow_duration_s = 60 }\n'
_PEERS = Path(__file__).resolve().parent / "peers"


async def test_a2a_streams_end_when_their_token_expires_and_the_task_goes_on(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """SendStreamingMessage and SubscribeToTask, each binding, driven by a2a-sdk: a stream
    opened with a token that expires ends then without an error and before the task
    stops; with a fresh token the task is still running (GetTask, SubscribeToTask)."""
    from cryptography.hazmat.primitives import serialization

    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        config = _config(tmp_path, issuer_toml(issuer) + "clock_skew_s = 0\n", extra=_LONG)
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            pem = issuer.keys["k1"].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            claims = {k: v for k, v in issuer.claims("alice").items() if k in ("iss", "aud", "sub")}
            args = {"text": "slow: and long", "ttl_s": 2, "key_pem": pem.decode(), "kid": "k1", "claims": claims}
            for binding in ("JSONRPC", "HTTP+JSON"):
                opts = {"url": d.url, "route": "long", "binding": binding, "dialect": "1.0", "token": None,
                        "scenarios": [["expiry", dict(args)]], "timeout_s": 60}  # fmt: skip
                proc = await trio.run_process([sys.executable, str(_PEERS / "a2a_client.py"), json.dumps(opts)],
                                              capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
                assert proc.returncode == 0, proc.stderr.decode(errors="replace") + d.log_text()[-3000:]
                got = json.loads(proc.stdout)["results"]["expiry"]
                assert "traceback" not in got, f"{binding}: {got}\n{d.log_text()[-3000:]}"
                # Each short-lived stream ended while the task was running, and closed cleanly.
                assert got["streamed"]["state"] == "TASK_STATE_WORKING", (binding, got["streamed"])
                assert got["after_stream"]["status"]["state"] == "TASK_STATE_WORKING", (binding, got["after_stream"])
                assert got["subscribed"]["kinds"][0] == "task" and got["subscribed"]["state"] == "TASK_STATE_WORKING", (binding, got)
                assert got["fresh"] == ["task", "artifactUpdate"], (binding, got["fresh"])
                assert got["final"]["status"]["state"] == "TASK_STATE_CANCELED", (binding, got["final"])
            ended = [line for line in d.log_text().splitlines() if "ended as its token expired" in line]
            assert len(ended) == 4 and all("alice" in line for line in ended), ended
            assert "eyJ" not in d.log_text()  # no token (a JWT's first bytes) in the log


async def test_an_mcp_get_stream_ends_when_its_token_expires_and_a_call_in_flight_keeps_its_answer(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """/mcp with a token that expires: a tools/call made before the expiry runs on past it
    and gets its answer (here: the turn, cancelled by a fresh token after the expiry);
    the session's GET stream, which would last as long as the client likes, ends."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        config = _config(tmp_path, issuer_toml(issuer) + "clock_skew_s = 0\n", extra=_LONG)
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            fresh = _h(issuer.mint("alice"))
            answers: list[Any] = []
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                async with create_mcp_http_client(headers=fresh) as http:
                    async with Client(streamable_http_client(d.url + "/mcp", http_client=http), mode="legacy", cache=None) as client:
                        await client.list_tools()  # the SDK checks a call's result against the tools' schemas, listed now
                        # Started: the call goes with a short token.
                        exp = int(time.time()) + 3
                        http.headers["Authorization"] = f"Bearer {issuer.mint('alice', exp=exp)}"
                        async with trio.open_nursery() as nursery:

                            async def call() -> None:
                                answers.append(await client.call_tool("long", {"prompt": "slow: and long"}))

                            nursery.start_soon(call)
                            sid = None
                            while sid is None:  # the call's session, as soon as it is listed
                                r = await h.get("/api/sessions", headers=fresh)
                                sid = next((x["session_id"] for x in r.json()["sessions"] if x["route"] == "long"), None)
                                await trio.lowlevel.checkpoint()
                            async with h.stream("GET", f"/api/sessions/{sid}/events", headers=fresh) as resp:
                                sse = Sse(resp)
                                await sse.until(lambda e: e.event == "caught_up")
                                # Live chunks of the turn, until one comes after the short token's end.
                                await sse.until(lambda e: e.event == "message_chunk" and time.time() > exp + 1)
                                r = await h.post(f"/api/sessions/{sid}/cancel", json={}, headers=fresh)
                                assert r.status_code == 200, r.text
                                ended = (await sse.until(lambda e: e.event == "turn_ended"))[-1]
                                assert json.loads(ended.data)["stop_reason"] == "cancelled", ended
                (answer,) = answers  # the call's stream outlived its token, up to its answer
                assert "cancelled" in json.dumps(answer.model_dump(mode="json")).lower(), answer

                # The GET stream of a session opened by hand with a short token ends too.
                short = _h(issuer.mint("alice", exp=int(time.time()) + 2))
                init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
                mcp_h = {**short, "Accept": "application/json, text/event-stream"}
                r = await h.post("/mcp", json=init, headers=mcp_h)
                assert r.status_code == 200, r.text
                mcp_h |= {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
                r = await h.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=mcp_h)
                assert r.status_code == 202, r.text
                async with h.stream("GET", "/mcp", headers={**mcp_h, "Accept": "text/event-stream"}) as resp:
                    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
                    async for _ in resp.aiter_raw():  # pings, until the stream ends
                        pass
            closed = [line for line in d.log_text().splitlines() if "closed as its token expired" in line]
            assert len(closed) == 1 and "GET stream" in closed[0], closed
            assert short["Authorization"].split()[1] not in d.log_text()


def _rules(tmp_path: Path, issuer_text: str, *, ops: bool) -> str:
    """A route whose turns run long; with `ops`, group "ops" may list, watch, use and
    answer alice's sessions, and Unix users start sessions; without, neither."""
    others = "".join(f"{k} = {_OPS}\n" for k in ("list", "watch", "use", "answer")) if ops else ""
    unix = ', { claim = "via", equals = "unix" }' if ops else ""
    return toml_head(tmp_path) + f"""
[routes.team]
back = {{ kind = "demo", chunk_delay_s = 0.05, slow_duration_s = 60 }}
[routes.team.access]
start = [{{ claim = "via", equals = "jwt" }}{unix}]
{others}
{issuer_text}
"""


async def test_a_reload_that_takes_access_away_ends_what_was_opened_with_it_on_every_front(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """bob (ops) follows alice's session and task: the canonical events stream, a /ws
    subscription, A2A SubscribeToTask, the change feed; an ACP editor (a Unix user) runs
    a turn. A SIGHUP with rules that no longer let ops in, nor Unix users start, ends
    each in its protocol's way; alice's own stream of the same session goes on."""
    from tests.daemon_support import Notifications

    notify = Notifications(tmp_path / "notify.sock")
    try:
        with running_issuer() as issuer, trio.fail_after(CEILING_S):
            config = _rules(tmp_path, issuer_toml(issuer), ops=True)
            async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
                await notify.wait_for(lambda s: s == ["READY"])
                alice, bob = _h(issuer.mint("alice")), _h(issuer.mint("bob", groups=["ops"]))
                async with httpx.AsyncClient(base_url=d.url, timeout=30) as h, d.acp("team") as editor:
                    sid = (await h.post("/api/sessions", json={"route": "team"}, headers=alice)).json()["session_id"]
                    assert (await h.post(f"/api/sessions/{sid}/prompt", json={"text": "slow: on"}, headers=alice)).status_code == 202
                    send = _send("slow: a2a")
                    send["params"]["configuration"] = {"returnImmediately": True}
                    task = (await h.post("/a2a/team", json=send, headers=alice)).json()["result"]["task"]
                    await editor.init()
                    acp_sid = await editor.new()
                    acp_turn = await editor.prompt(acp_sid, "slow: editor")
                    await editor.until(lambda: len(editor.chunks(acp_sid)) >= 2)

                    url = d.url.replace("http://", "ws://") + "/ws"
                    async with (
                        h.stream("GET", f"/api/sessions/{sid}/events", headers=bob) as bob_events,
                        h.stream("GET", f"/api/sessions/{sid}/events", headers=alice) as alice_events,
                        h.stream("GET", "/api/changes", headers=bob) as bob_feed,
                        h.stream("POST", "/a2a/team", headers={**bob, "Accept": "text/event-stream"},
                                 json={"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task["id"]}}) as bob_task,
                        open_websocket_url(url, extra_headers=[("Authorization", bob["Authorization"])]) as ws,
                    ):  # fmt: skip
                        bob_sse, alice_sse, feed, task_sse = Sse(bob_events), Sse(alice_events), Sse(bob_feed), Sse(bob_task)
                        for sse in (bob_sse, alice_sse):
                            await sse.until(lambda e: e.event == "message_chunk")  # live, past the replay
                        assert (await task_sse.until(lambda e: True))[0].data  # the task, as it is
                        await ws.send_message(json.dumps({"event": "session:subscribe", "data": {"session_id": sid}}))
                        while json.loads(await ws.get_message())["event"] != "session:subscribed":
                            pass

                        d.config.write_text(_rules(tmp_path, issuer_toml(issuer), ops=False))
                        d.signal(signal.SIGHUP)
                        await notify.wait_for(lambda s: s.count("READY") >= 2 and s[-1] == "READY")

                        # The canonical events stream: `gone`, saying why; then the end.
                        gone = (await bob_sse.until(lambda e: e.event == "gone"))[-1]
                        assert json.loads(gone.data)["reason"] == "access", gone
                        assert await bob_sse.next() is None
                        r = await h.get(f"/api/sessions/{sid}/events", params={"through": 0}, headers=bob)
                        assert r.status_code == 404, r.text
                        # /ws: that subscription ends with not_found; the connection stays open.
                        frame = json.loads(await ws.get_message())
                        while frame["event"] != "system:error":
                            frame = json.loads(await ws.get_message())
                        assert frame["data"]["code"] == "not_found" and frame["data"]["session_id"] == sid, frame
                        await ws.send_message(json.dumps({"event": "session:subscribe", "data": {"session_id": sid}}))
                        frame = json.loads(await ws.get_message())
                        while frame["event"] not in ("system:error", "session:subscribed"):
                            frame = json.loads(await ws.get_message())
                        assert frame["event"] == "system:error" and frame["data"]["code"] == "not_found", frame
                        # A2A: the stream ends (A2A 1.0 ends a stream by closing it), saying why in a comment.
                        while await task_sse.next() is not None:
                            pass
                        assert b": access revoked" in task_sse.text, task_sse.text[-300:]
                        get = {"jsonrpc": "2.0", "id": 8, "method": "GetTask", "params": {"id": task["id"]}}
                        assert (await h.post("/a2a/team", json=get, headers=bob)).json()["error"]["code"] == -32001
                        # The change feed: read the list again.
                        await feed.until(lambda e: e.event == "reset")
                        # ACP: the Unix user may no longer use its session: its turn is cancelled, the session detached.
                        assert (await editor.response(acp_turn, timeout=20))["result"] == {"stopReason": "cancelled"}
                        again = await editor.call("session/prompt", {"sessionId": acp_sid, "prompt": [{"type": "text", "text": "more"}]})
                        assert again["error"]["code"] == -32002, again  # not found (ACP)
                        # alice's own stream of the session goes on, live: it hears the cancel she makes now.
                        assert (await h.post(f"/api/sessions/{sid}/cancel", json={}, headers=alice)).json() == {"cancelled": True}
                        await alice_sse.until(lambda e: e.event == "turn_ended")
                ended = [line for line in d.log_text().splitlines() if "stream(s) ended: the new access rules refuse" in line]
                assert len(ended) == 1, d.log_text()[-3000:]
                assert "a stream of bob ended: the reloaded access rules refuse it the task" in d.log_text()
    finally:
        notify.close()


async def test_a_send_that_fails_leaves_no_subscription_to_a_session_one_may_not_watch(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """/ws subscribes the sender of a `chat:send` to hear its run. A made-up answer from a
    caller who may only answer, or a prompt into a busy session from one who may only
    use it, sends nothing: neither may watch the session through it."""
    qa = '[{ claim = "groups", contains = "qa" }]'
    dev = '[{ claim = "groups", contains = "dev" }]'
    config = toml_head(tmp_path) + f"""
[routes.team]
back = {{ kind = "demo", chunk_delay_s = 0.02, slow_duration_s = 60 }}
[routes.team.access]
answer = {qa}
use = {dev}
"""
    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config + issuer_toml(issuer)) as d:
            alice = _h(issuer.mint("alice"))
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                sid = (await h.post("/api/sessions", json={"route": "team"}, headers=alice)).json()["session_id"]
                assert (await h.post(f"/api/sessions/{sid}/prompt", json={"text": "slow: busy"}, headers=alice)).status_code == 202
                url = d.url.replace("http://", "ws://") + "/ws"
                async with h.stream("GET", f"/api/sessions/{sid}/events", headers=alice) as resp:
                    mine = Sse(resp)
                    await mine.until(lambda e: e.event == "caught_up")
                    for who, send in (
                        ("carol", {"session_id": sid, "askuser_answer": {"tool_call_id": "made-up", "answers": {"q": "yes"}}}),
                        ("dan", {"session_id": sid, "message": "me too"}),
                    ):
                        token = issuer.mint(who, groups=["qa" if who == "carol" else "dev"])
                        async with open_websocket_url(url, extra_headers=[("Authorization", f"Bearer {token}")]) as ws:
                            await ws.send_message(json.dumps({"event": "chat:send", "data": send}))
                            first = json.loads(await ws.get_message())
                            while first["event"] == "session:commands":  # said as it subscribed, before the send failed
                                first = json.loads(await ws.get_message())
                            assert first["event"] == "system:error", (who, first)
                            # alice's run goes on: a chunk after the failed send reaches every
                            # watcher at once, so one of this socket would come before the
                            # answer to the frame sent next.
                            await mine.until(lambda e: e.event == "message_chunk")
                            await ws.send_message(json.dumps({"event": "no:such"}))
                            frames = [json.loads(await ws.get_message())]
                            while frames[-1]["event"] != "system:error":
                                frames.append(json.loads(await ws.get_message()))
                            assert [f["event"] for f in frames] == ["system:error"], (who, frames)
                            assert frames[-1]["data"]["code"] == "unknown_event", frames
                assert (await h.post(f"/api/sessions/{sid}/cancel", json={}, headers=alice)).json() == {"cancelled": True}
