"""Inbound identity end to end: a real `agent-bridge serve` with `[[auth.issuers]]` naming
a local test issuer (tests/issuer_support.py), called on every HTTP front.

- Every front (A2A JSON-RPC and HTTP+JSON, REST /api, the canonical events API, /ws
  with the header or with a first-frame token, /mcp with the official SDK) accepts a
  valid token and refuses, with 401 and an RFC 6750 / RFC 9728 challenge, no token, an
  expired one, another audience, another issuer, an unknown kid, `alg: none`, HS256
  signed with the public key; a rotated key (a new kid in the JWK Set) is accepted.
- Agent cards, the console's files and /healthz stay public; the card names the issuer
  (`openIdConnect`, A2A 1.0 and 0.3 shapes).
- A front's own static token still works beside the issuers.
- An MCP client on the SDK's `OAuthClientProvider` signs in by itself: it reads the
  resource metadata named by the 401, finds the issuer, registers, gets a code and a
  token, and calls a tool.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.daemon_support import Daemon, start_daemon, toml_head
from tests.issuer_support import TestIssuer, issuer_toml, running_issuer

CEILING_S = 90


def _config(tmp_path: Path, issuer: TestIssuer, extra: str = "") -> str:
    return toml_head(tmp_path) + f"""
[routes.demo]
back = {{ kind = "demo", chunk_delay_s = 0 }}

[routes.keyed]
back = {{ kind = "demo", chunk_delay_s = 0 }}
[routes.keyed.a2a]
token_env = "KEYED_TOKEN"

{extra}
{issuer_toml(issuer, refresh_min_s=1)}
"""


def _send(word: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": f"m-{word}-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": word}]}}}  # fmt: skip


def _bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


async def _ws_turn(d: Daemon, *, header: str | None = None, first_frame: str | None = None, word: str = "hi") -> dict[str, Any]:
    """One chat:send on a new session over /ws; the last frame (chat:end or system:error)."""
    async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        r = await h.post("/api/sessions", json={"route": "demo"}, headers=_bearer(header or first_frame))
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
    extra = [("Authorization", f"Bearer {header}")] if header else []
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", extra_headers=extra) as ws:
        if first_frame is not None:
            await ws.send_message(json.dumps({"auth": {"token": first_frame}}))
        await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": word}}))
        while True:
            frame = json.loads(await ws.get_message())
            if frame["event"] in ("chat:end", "system:error"):
                return frame


async def test_every_front_takes_issuer_tokens_and_refuses_bad_ones(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        env = {**clean_env, "KEYED_TOKEN": "static-s3cret"}
        async with start_daemon(bridge_exe, tmp_path, env, _config(tmp_path, issuer)) as d:
            good = issuer.mint("alice", groups=["ops"])
            async with httpx.AsyncClient(base_url=d.url, timeout=20, headers={"A2A-Version": "1.0"}) as h:
                # -- public: the card (naming the issuer), the console, /healthz, the metadata.
                r = await h.get("/a2a/demo/.well-known/agent-card.json")
                assert r.status_code == 200, r.text
                card = r.json()
                discovery = issuer.url + "/.well-known/openid-configuration"
                assert card["securitySchemes"]["oidc"] == {"openIdConnectSecurityScheme": {"openIdConnectUrl": discovery}}
                assert {"schemes": {"oidc": {}}} in card["securityRequirements"]  # StringList() with no scopes
                r = await h.get("/a2a/demo/.well-known/agent-card.json", headers={"A2A-Version": "0.3"})
                merged = r.json()["securitySchemes"]["oidc"]  # 1.0 and 0.3 shapes in one (a2a-sdk's merged card)
                assert merged["type"] == "openIdConnect" and merged["openIdConnectUrl"] == discovery, merged
                assert {"oidc": []} in r.json()["security"]
                for path in ("/", "/healthz"):
                    assert (await h.get(path)).status_code == 200, path
                r = await h.get("/.well-known/oauth-protected-resource/mcp")
                assert r.json() == {"resource": d.url + "/mcp", "authorization_servers": [issuer.url],
                                    "bearer_methods_supported": ["header"], "resource_name": "agent-bridge"}  # fmt: skip

                # -- A2A: a good token runs a turn; each bad one is a 401 with the challenge.
                r = await h.post("/a2a/demo", json=_send("a2a hello"), headers=_bearer(good))
                assert r.status_code == 200 and r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
                other = TestIssuer()
                other.url = issuer.url
                now = int(time.time())
                bad = {
                    "none": None,
                    "expired": issuer.mint(exp=now - 3600),
                    "audience": issuer.mint(aud="https://other.example/"),
                    "issuer": issuer.mint(iss="https://evil.example/"),
                    "unknown kid": other.mint(kid="k1", headers={"kid": "k-unknown"}),
                    "foreign key": other.mint(kid="k1"),
                    "alg none": issuer.forged_none(),
                    "hs256 with the public key": issuer.forged_hs256(),
                    "garbage": "a.b.c",
                }
                for why, token in bad.items():
                    r = await h.post("/a2a/demo", json=_send(why), headers=_bearer(token))
                    assert r.status_code == 401, (why, r.text)
                    challenge = r.headers["www-authenticate"]
                    assert challenge.startswith("Bearer ") and f'resource_metadata="{d.url}/.well-known/oauth-protected-resource"' in challenge
                    assert r.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED", r.text
                    assert (token is None) == ("invalid_token" not in challenge), (why, challenge)
                    r = await h.get("/a2a/demo/tasks", headers=_bearer(token))  # HTTP+JSON binding
                    assert r.status_code == 401 and r.json()["error"]["status"] == "UNAUTHENTICATED", (why, r.text)
                    r = await h.get("/api/sessions", headers=_bearer(token))
                    assert r.status_code == 401, (why, r.text)
                    r = await h.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=_bearer(token))
                    assert r.status_code == 401 and "oauth-protected-resource/mcp" in r.headers["www-authenticate"], (why, r.text)
                r = await h.get("/a2a/demo/tasks", headers=_bearer(good))
                assert r.status_code == 200, r.text

                # -- rotation: a new key appears in the JWK Set; its tokens are accepted.
                issuer.rotate("k2")
                with trio.fail_after(10):
                    while True:  # refused until jwks_refresh_min_s (1 s) has passed, then fetched once
                        r = await h.post("/a2a/demo", json=_send("rotated"), headers=_bearer(issuer.mint("bob", kid="k2")))
                        if r.status_code == 200:
                            break
                        assert r.status_code == 401, r.text
                        await trio.sleep(0.2)
                assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

                # -- a route's own static token still works beside the issuers.
                r = await h.post("/a2a/keyed", json=_send("static"), headers=_bearer("static-s3cret"))
                assert r.status_code == 200, r.text
                r = await h.post("/a2a/keyed", json=_send("jwt"), headers=_bearer(good))
                assert r.status_code == 200, r.text
                r = await h.post("/a2a/keyed", json=_send("wrong"), headers=_bearer("wrong"))
                assert r.status_code == 403, r.text

                # -- REST and the canonical events API.
                r = await h.post("/api/sessions", json={"route": "demo"}, headers=_bearer(good))
                assert r.status_code == 200, r.text
                sid = r.json()["session_id"]
                r = await h.post(f"/api/sessions/{sid}/prompt", json={"content": [{"type": "text", "text": "x"}]})
                assert r.status_code == 401, r.text
                r = await h.get(f"/api/sessions/{sid}/messages", headers=_bearer(good))
                assert r.status_code == 200, r.text

            # -- /ws: the header, or the first frame (what a browser sends).
            assert (await _ws_turn(d, header=good))["data"]["status"] == "completed"
            assert (await _ws_turn(d, first_frame=good))["data"]["status"] == "completed"
            ws = d.url.replace("http://", "ws://") + "/ws"
            from trio_websocket import ConnectionRejected

            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(ws, extra_headers=[("Authorization", f"Bearer {bad['expired']}")]):
                    pass
            assert rejected.value.status_code == 401
            async with open_websocket_url(ws) as conn:
                await conn.send_message(json.dumps({"auth": {"token": bad["alg none"]}}))
                frame = json.loads(await conn.get_message())
                assert frame["event"] == "system:error" and frame["data"]["code"] == "unauthorized", frame

            # -- /mcp with the official SDK and a token.
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with create_mcp_http_client(headers=_bearer(good)) as http:
                async with Client(streamable_http_client(d.url + "/mcp", http_client=http)) as client:
                    result = await client.call_tool("demo", {"prompt": "mcp hello"})
                    assert result.content[0].text == "You said: mcp hello", result
            assert good not in d.log_text() and "static-s3cret" not in d.log_text()
        # Who ran each turn, as the audit lines say: the issuer's subject, or the route's static token.
        audit = [json.loads(line.split(": audit ", 1)[1]) for line in d.log_text().splitlines() if "bridge.audit" in line]
        whos = {(a["who"], a["route"], a["front"]) for a in audit}
        # A static token's key reads "token::..." and the log redacts what looks like "token: x";
        # its via and subject still say who it was.
        assert any(a["via"] == "token" and a["subject"] == "a2a/keyed" and a["route"] == "keyed" for a in audit), audit
        assert (f"jwt:{issuer.url}:alice", "demo", "a2a") in whos and (f"jwt:{issuer.url}:bob", "demo", "a2a") in whos, whos
        assert (f"jwt:{issuer.url}:alice", "demo", "mcp") in whos, whos
        assert (f"jwt:{issuer.url}:alice", "demo", "ws") in whos, whos


async def test_an_mcp_client_signs_in_by_itself_from_the_401(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    """MCP 2025-11-25 Authorization, driven by the SDK's OAuthClientProvider: the 401's
    `resource_metadata` → our RFC 9728 document → the issuer's RFC 8414 metadata →
    registration, authorization code with PKCE, token → the call goes through."""
    import httpx2
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

    class Memory:
        def __init__(self) -> None:
            self.tokens: OAuthToken | None = None
            self.client: OAuthClientInformationFull | None = None

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> OAuthClientInformationFull | None:
            return self.client

        async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
            self.client = client_info

    redirected: list[str] = []

    async def redirect(url: str) -> None:  # the "browser": follow the issuer's redirect once
        async with httpx.AsyncClient(timeout=10) as h:
            r = await h.get(url)
        assert r.status_code == 302, r.text
        redirected.append(r.headers["location"])

    async def callback() -> AuthorizationCodeResult:
        from urllib.parse import parse_qs, urlsplit

        q = parse_qs(urlsplit(redirected[-1]).query)
        return AuthorizationCodeResult(code=q["code"][0], state=q["state"][0])

    with running_issuer() as issuer, trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, clean_env, _config(tmp_path, issuer)) as d:
            storage = Memory()
            provider = OAuthClientProvider(
                server_url=d.url + "/mcp",
                client_metadata=OAuthClientMetadata(client_name="test", redirect_uris=["http://127.0.0.1:1/callback"]),  # type: ignore[list-item]
                storage=storage,
                redirect_handler=redirect,
                callback_handler=callback,
            )
            async with httpx2.AsyncClient(auth=provider, timeout=20) as http:
                async with Client(streamable_http_client(d.url + "/mcp", http_client=http)) as client:
                    result = await client.call_tool("demo", {"prompt": "signed in"})
            assert result.content[0].text == "You said: signed in", result
            # It found the issuer through our metadata and asked for a token for our resource.
            assert issuer.authorized and issuer.authorized[0]["resource"] == d.url + "/mcp", issuer.authorized
            assert issuer.authorized[0]["code_challenge_method"] == "S256"
            assert storage.tokens is not None and issuer.token_requests[0]["grant_type"] == "authorization_code"
