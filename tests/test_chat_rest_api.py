"""End to end: the sessions listing and routes of the chat REST API (bridge/fronts/chat/rest.py,
routes_api.py) on a real `agent-bridge serve`.

One session is opened through each front by its own client (the ACP SDK through
`agent-bridge acp --connect`, the a2a JSON-RPC binding, the chat REST API and /ws, the
`mcp` SDK's tools/call, and `agent-bridge ask` sharing the state directory), then the
listing is filtered by the front each recorded, by status, route and title, and
counted; every filter value outside its set, and every unknown parameter or body
field, is a 400 naming what is allowed; `GET /api/routes` shows each route's back,
commands, options and health, and `GET /api/sessions/{id}` a session's commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon_support import assert_serves_every_front, base_config, demo_route, start_daemon

pytestmark = pytest.mark.trio

FRONTS = ["acp", "a2a", "chat", "mcp", "cli"]
GREET = {"description": "Greet someone", "arguments": [{"name": "who", "required": True}], "messages": [{"text": "Say hello to {who}."}]}
MODE = {"id": "mode", "name": "Mode", "default": "careful", "values": [{"value": "fast", "name": "Fast"}, {"value": "careful", "name": "Careful"}]}


async def test_sessions_of_every_front_are_listed_filtered_counted_and_routes_are_described(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    routes = {
        "demo": {**demo_route(), "description": "The demo agent", "options": [MODE], "prompts": {"greet": GREET}},
        "other": demo_route(),
    }
    config = base_config(tmp_path, routes, default_route="demo")
    async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=30) as h:
        with trio.fail_after(120):
            await assert_serves_every_front(d, clean_env)
            ask = await trio.run_process(
                [*bridge_exe, "ask", "demo", "cli hello", "--config", str(d.config), "--state-dir", str(tmp_path / "state")],
                capture_stdout=True, capture_stderr=True, check=False, env=clean_env,
            )  # fmt: skip
            assert ask.returncode == 0 and b"You said: cli hello" in ask.stdout, ask.stderr
            r = await h.post("/api/sessions", json={"route": "other", "intent": "Find the Needle_%  in it"})
            assert r.status_code == 200, r.text
            needle = r.json()["session_id"]

            # Counted by front, status and route; every front's session under its own name.
            r = await h.get("/api/sessions", params={"counts": "1", "limit": "2"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["total"], body["limit"], body["offset"], len(body["sessions"])) == (6, 2, 0, 2)
            assert body["counts"] == {
                "status": {"created": 1, "running": 0, "waiting_for_input": 0, "completed": 5, "failed": 0, "interrupted": 0},
                "front": {"acp": 1, "a2a": 1, "chat": 2, "mcp": 1, "cli": 1},
                "route": {"demo": 5, "other": 1},
            }
            for front in FRONTS:
                listed = (await h.get("/api/sessions", params={"front": front})).json()
                assert listed["total"] == body["counts"]["front"][front], (front, listed)
                for info in listed["sessions"]:
                    assert (info["front"], info["back"]) == (front, "demo"), info
                    if info["session_id"] != needle:
                        assert (info["route"], info["status"], info["turn_count"] >= 1) == ("demo", "completed", True), info
            acp = (await h.get("/api/sessions", params={"front": "acp"})).json()["sessions"][0]
            assert acp["turn_count"] == 2  # the ACP client's two prompts

            # Status, route and title (any case; `_` and `%` are themselves) filters, together.
            created = (await h.get("/api/sessions", params={"status": "created"})).json()
            assert [s["session_id"] for s in created["sessions"]] == [needle]
            assert created["sessions"][0] | {"created_at": "", "updated_at": ""} == {
                "session_id": needle, "route": "other", "title": "Find the Needle_% in it", "intent": "Find the Needle_%  in it",
                "status": "created", "front": "chat", "back": "demo", "turn_count": 0, "created_at": "", "updated_at": "",
            }  # fmt: skip
            for params, ids in (
                ({"q": "needle_%"}, [needle]), ({"q": "NEEDLE", "route": "other", "front": "chat"}, [needle]),
                ({"q": "Needle", "status": "completed"}, []), ({"q": "needle%"}, []), ({"route": "other"}, [needle]),
            ):  # fmt: skip
                r = await h.get("/api/sessions", params=params)
                assert [s["session_id"] for s in r.json()["sessions"]] == ids, (params, r.text)

            # A value outside its set, an unknown parameter: 400 naming what is allowed.
            for params, named in (
                ({"status": "done"}, "created, running, waiting_for_input, completed, failed, interrupted"),
                ({"front": "ws"}, "acp, a2a, chat, mcp, cli, unknown"),
                ({"route": "nope"}, "demo, other"),
                ({"counts": "yes"}, "counts must be an integer"),
                ({"q": "x" * 201}, "at most 200"),
                ({"sort": "title"}, "unknown query parameter 'sort'; parameters are limit, offset, route, front, status, q, counts"),
            ):  # fmt: skip
                r = await h.get("/api/sessions", params=params)
                assert r.status_code == 400 and named in r.json()["detail"], (params, r.text)
            r = await h.post("/api/sessions", json={"route": "demo", "title": "x"})
            assert r.status_code == 400 and "unknown field `title`" in r.json()["detail"], r.text
            r = await h.post("/api/sessions", json={"route": "nope"})
            assert r.status_code == 404 and "['demo', 'other']" in r.json()["detail"], r.text
            assert (await h.get("/api/sessions")).json()["total"] == 6  # nothing was made by a refused request

            # One session: the route's commands (the back's, then its prompts) and its last event.
            one = (await h.get(f"/api/sessions/{acp['session_id']}")).json()
            commands: dict[str, Any] = {c["name"]: c for c in one["commands"]}
            assert commands["greet"] == {"name": "greet", "description": "Greet someone", "hint": "<who>"}
            assert "all" in commands and list(commands)[-1] == "greet"
            assert one["last_seq"] > 0 and one["front"] == "acp"
            fresh = (await h.get(f"/api/sessions/{needle}")).json()
            assert fresh["last_seq"] == 0 and "greet" not in {c["name"] for c in fresh["commands"]}

            # The routes: back, default, commands, options, health (the /readyz probes, no detail).
            r = await h.get("/api/routes")
            assert r.status_code == 200, r.text
            described = {route["name"]: route for route in r.json()["routes"]}
            assert r.json()["prompt_sources"] == []
            demo, other = described["demo"], described["other"]
            assert (demo["back"], demo["description"], demo["default"], other["default"]) == ("demo", "The demo agent", True, False)
            assert demo["commands"] == one["commands"] and other["commands"] == fresh["commands"]
            assert demo["options"] == [{"id": "mode", "name": "Mode", "current": "careful", "values": [
                {"value": "fast", "name": "Fast"}, {"value": "careful", "name": "Careful"}]}]  # fmt: skip
            assert other["options"] == [] and demo["health"] == other["health"] == {"status": "ok"}
