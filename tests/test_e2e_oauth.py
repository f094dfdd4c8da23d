"""End to end: a real `agent-bridge serve` getting OAuth access tokens for its backs and prompt sources.

Every peer is its own process on 127.0.0.1: an OAuth 2 server (tests/peers/oauth_server.py:
client credentials, refresh tokens, RFC 7662 introspection), an A2A agent on a2a-sdk
(tests/peers/a2a_agent.py --introspect), a Blade-style Socket.IO chat server
(tests/peers/socketio_server.py --introspect) and an MCP prompts server on the official
`mcp` SDK over Streamable HTTP (tests/peers/mcp_prompts_server.py, $PROMPTS_INTROSPECT).
Each accepts only a bearer token the OAuth server says is active, so every answered
call proves a good token reached it. Turns are sent through the daemon's A2A front.

- `research` (A2A back): a token by client credentials; once it has expired on the
  server's clock, the next turn renews it with its refresh token; after the server
  revokes every token, the agent's 401 renews it and the call is sent once more.
- `research-bad` (A2A back, a wrong client secret): the turn fails saying the token
  endpoint refused the client (`invalid_client`), and no log line holds a secret.
- `chatty` (chat back, Socket.IO): its REST call and its CONNECT carry a token.
- the prompt source `team` (Streamable HTTP): listed and expanded through the
  daemon's MCP front with a token of its own.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import trio
from mcp import Client

from daemon_support import serve_peer, start_daemon, until_log
from mcp_support import TEAM_PROMPTS, Control, prompts_server_http

PEERS = Path(__file__).resolve().parent / "peers"
SECRET = "bridge-client-s3cret-never-logged"



def _oauth(auth: str, scope: str, secret_env: str = "OAUTH_SECRET") -> str:
    return f'{{ token_url = "{auth}/token", client_id = "bridge", client_secret_env = "{secret_env}", scope = "{scope}" }}'


async def _turn(h: httpx.AsyncClient, route: str, text: str, mid: str) -> dict[str, Any]:
    msg = {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}
    r = await h.post(f"/a2a/{route}", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": msg}},
                     headers={"A2A-Version": "1.0"})  # fmt: skip
    assert r.status_code == 200, r.text
    return r.json()["result"]["task"]  # type: ignore[no-any-return]


async def test_backs_and_prompt_sources_get_tokens(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    oauth_cmd = [sys.executable, str(PEERS / "oauth_server.py"), "--client", f"bridge:{SECRET}", "--expires-in", "2", "--refresh"]
    async with contextlib.AsyncExitStack() as stack:
        auth = f"http://127.0.0.1:{await stack.enter_async_context(serve_peer(oauth_cmd, tmp_path / 'oauth.log'))}"
        introspect = auth + "/introspect"
        agent = await stack.enter_async_context(
            serve_peer([sys.executable, str(PEERS / "a2a_agent.py"), "--introspect", introspect], tmp_path / "agent.log")
        )
        chat = await stack.enter_async_context(
            serve_peer([sys.executable, str(PEERS / "socketio_server.py"), "--introspect", introspect], tmp_path / "chat.log")
        )
        control = Control(tmp_path / "control.json", TEAM_PROMPTS)
        source = await stack.enter_async_context(prompts_server_http(control, tmp_path / "team.log", PROMPTS_INTROSPECT=introspect))
        config = f"""
[server]
listen = "127.0.0.1:0"
graceful_timeout_s = 1

admin_token_env = "ADMIN_TOKEN"

[daemon]
acp_socket = false

[[prompt_sources]]
name = "team"
url = "{source}"
retry_initial_s = 0.2
oauth = {_oauth(auth, "prompts")}

[routes.research]
back = {{ kind = "a2a", url = "http://127.0.0.1:{agent}" }}
oauth = {_oauth(auth, "a2a")}

[routes.research-bad]
back = {{ kind = "a2a", url = "http://127.0.0.1:{agent}" }}
oauth = {_oauth(auth, "bad", "BAD_SECRET")}

[routes.chatty]
back = {{ kind = "chat", url = "http://127.0.0.1:{chat}/socket.io/", dialect = "socketio" }}
oauth = {_oauth(auth, "chat")}
"""
        env = {**clean_env, "OAUTH_SECRET": SECRET, "BAD_SECRET": "wrong-" + SECRET, "ADMIN_TOKEN": "admin-t0ken"}
        d = await stack.enter_async_context(start_daemon(bridge_exe, tmp_path, env, config))
        h = await stack.enter_async_context(httpx.AsyncClient(base_url=d.url, timeout=30))
        tokens = await stack.enter_async_context(httpx.AsyncClient(base_url=auth, timeout=30))

        async def grants(scope: str) -> list[tuple[str, bool]]:
            return [(e["grant"], e["ok"]) for e in (await tokens.get("/_test/log")).json() if e.get("scope") == scope]

        with trio.fail_after(120):
            # The A2A back: a token by client credentials.
            task = await _turn(h, "research", "hello one", "m1")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED" and "You said: hello one" in json.dumps(task), task
            assert await grants("a2a") == [("client_credentials", True)]

            # Expired on the server's clock (long-polled there): renewed with the refresh token first.
            await tokens.get("/_test/wait-expired", params={"scope": "a2a"})
            task = await _turn(h, "research", "hello two", "m2")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            assert await grants("a2a") == [("client_credentials", True), ("refresh_token", True)]

            # Every token revoked: the agent answers 401, the bridge renews once and sends again.
            await tokens.post("/_test/revoke")
            task = await _turn(h, "research", "hello three", "m3")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            assert len(await grants("a2a")) == 3
            log = (await httpx.AsyncClient(trust_env=False).get(f"http://127.0.0.1:{agent}/_test/log")).json()
            sends = [e for e in log if e["method"] == "POST" and "m3" in json.dumps(e["body"])]
            assert len(sends) == 2 and sends[0]["headers"]["authorization"] != sends[1]["headers"]["authorization"]
            assert all(e["headers"]["authorization"].startswith("Bearer ") for e in sends)
            assert "x-forwarded-user" not in sends[1]["headers"]  # an anonymous caller is not named

            # A wrong client secret: the turn fails in words, without the secret.
            task = await _turn(h, "research-bad", "hello", "m4")
            assert task["status"]["state"] == "TASK_STATE_FAILED", task
            said = json.dumps(task)
            assert "invalid_client" in said and "token endpoint" in said and "research-bad" in said, said
            assert await grants("bad") == [("client_credentials", False)]

            # The chat back: REST and the Socket.IO CONNECT with a token.
            task = await _turn(h, "chatty", "hello chat", "m5")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED" and "You said: chat" in json.dumps(task), task
            assert await grants("chat") == [("client_credentials", True)]
            chat_log = (await httpx.AsyncClient(trust_env=False).get(f"http://127.0.0.1:{chat}/_test/log")).json()
            assert not [e for e in chat_log if e["kind"] == "refused"], chat_log
            # Revoked: a new session's POST /api/sessions gets 401, the token is renewed, the call sent again.
            await tokens.post("/_test/revoke")
            task = await _turn(h, "chatty", "hello again", "m6")
            assert task["status"]["state"] == "TASK_STATE_COMPLETED" and "You said: again" in json.dumps(task), task
            assert len(await grants("chat")) == 2
            chat_log = (await httpx.AsyncClient(trust_env=False).get(f"http://127.0.0.1:{chat}/_test/log")).json()
            posts = [e["auth"] for e in chat_log if e["kind"] == "rest" and e["method"] == "POST"]
            assert len(posts) == 3, chat_log  # the first session's, then the new one's twice

            # The prompt source: up with its token, its prompt expanded through the MCP front.
            await until_log(d, "prompt source team: 3 prompts")
            async with Client(d.url + "/mcp", mode="legacy", cache=None) as mcp:
                names = [p.name for p in (await mcp.list_prompts()).prompts]
                assert "greet" in names, names
                got = await mcp.get_prompt("greet", {"who": "Ada"})
            assert got.messages[0].content.text == "Say hello to Ada.", got
            assert (await grants("prompts"))[0] == ("client_credentials", True)

            # /readyz (with the operators' token) says which routes have their token.
            r = await h.get("/readyz", headers={"Authorization": "Bearer admin-t0ken"})
            assert "an OAuth access token from" in r.text and "invalid_client" in r.text, r.text
            assert SECRET not in r.text

        text = d.log_text()
        assert SECRET not in text and "wrong-" + SECRET not in text
