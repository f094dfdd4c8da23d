"""The outbound OAuth client (bridge/transport/oauth.py) against a real token endpoint.

The authorization server is tests/peers/oauth_server.py, in its own process on a port
the OS picks. What is checked comes from its log (every token request it received)
and from what `OAuthClient` answers: one request for many concurrent callers, the
refresh token used when the access token runs out, a new grant when it is refused,
retries of a failing endpoint, a refusal in words that carry no secret, and the
configuration's checks. The renewal schedule itself is checked on trio's MockClock
against an in-process transport (no wall-clock waits).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.config import parse_config
from bridge.errors import BackError, BackUnavailable, ConfigError
from bridge.transport.config import OAuthConfig
from bridge.transport.oauth import OAuthClient
from daemon_support import serve_peer

SERVER = Path(__file__).resolve().parent / "peers" / "oauth_server.py"
SECRET = "cl13nt-s3cret-never-shown"


class TokenServer:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    async def log(self) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(trust_env=False) as h:
            return (await h.get(self.url + "/_test/log")).json()  # type: ignore[no-any-return]

    async def active(self, token: str) -> bool:
        async with httpx.AsyncClient(trust_env=False) as h:
            return bool((await h.post(self.url + "/introspect", data={"token": token})).json()["active"])

    async def wait_expired(self, token: str) -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as h:
            await h.get(self.url + "/_test/wait-expired", params={"token": token})


@contextlib.asynccontextmanager
async def token_server(tmp_path: Path, *args: str) -> AsyncIterator[TokenServer]:
    log = tmp_path / f"oauth-{len(list(tmp_path.iterdir()))}.log"
    async with serve_peer([sys.executable, str(SERVER), "--client", f"bridge:{SECRET}", *args], log) as port:
        yield TokenServer(port)


def config(server: TokenServer, **over: Any) -> OAuthConfig:
    raw = {"token_url": server.url + "/token", "client_id": "bridge", "client_secret_env": "TEST_OAUTH_SECRET", **over}
    return msgspec.convert(raw, OAuthConfig)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OAUTH_SECRET", SECRET)


async def test_many_callers_one_request_then_refresh_then_new_grant(tmp_path: Path) -> None:
    async with token_server(tmp_path, "--expires-in", "1", "--refresh") as server:
        client = OAuthClient(config(server, scope="agents:call", audience="https://agent.example"), name="route r")
        got: list[str] = []

        async def one() -> None:
            got.append(await client.token())

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for _ in range(40):
                    nursery.start_soon(one)
            assert len(set(got)) == 1 and await server.active(got[0])
            log = await server.log()
            assert [e["grant"] for e in log] == ["client_credentials"], log
            assert log[0]["scope"] == "agents:call" and log[0]["audience"] == "https://agent.example"
            assert "client_id" not in log[0]["keys"]  # HTTP Basic by default (RFC 6749 §2.3.1)

            # Past its life (the server's clock says so), the refresh token renews it.
            await server.wait_expired(got[0])
            second = await client.token()
            assert second != got[0] and await server.active(second)
            assert [e["grant"] for e in await server.log()] == ["client_credentials", "refresh_token"]

            # The agent refuses a token: invalidated once, the next call gets another.
            client.invalidate(second)
            client.invalidate(second)
            third = await client.token()
            assert third not in (got[0], second)
            assert len(await server.log()) == 3
        await client.aclose()


async def test_a_refused_refresh_token_falls_back_to_the_grant(tmp_path: Path) -> None:
    async with token_server(tmp_path, "--expires-in", "1", "--refresh") as server:
        client = OAuthClient(config(server, client_auth="post"), name="route r")
        with trio.fail_after(20):
            first = await client.token()
            client._refresh = "not-a-refresh-token"  # revoked meanwhile, as far as the server knows
            await server.wait_expired(first)
            assert await server.active(await client.token())
        log = await server.log()
        assert [(e["grant"], e["ok"]) for e in log] == [("client_credentials", True), ("refresh_token", False), ("client_credentials", True)]
        assert "client_id" in log[0]["keys"]  # client_auth = "post": the credentials in the form
        await client.aclose()


async def test_a_wrong_secret_is_a_clear_error_without_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OAUTH_SECRET", "wrong-" + SECRET)
    async with token_server(tmp_path) as server:
        client = OAuthClient(config(server, retries=3), name="route r")
        with trio.fail_after(20), pytest.raises(BackError) as caught:
            await client.token()
        message = caught.value.message
        assert not isinstance(caught.value, BackUnavailable)
        assert "route r" in message and "invalid_client" in message and "client_credentials" in message, message
        assert SECRET not in message and SECRET not in repr(client) and SECRET not in repr(client.cfg)
        assert len(await server.log()) == 1  # a refusal is not retried
        await client.aclose()


async def test_a_failing_endpoint_is_retried_within_bounds(tmp_path: Path) -> None:
    async with token_server(tmp_path, "--fail-first", "2") as server:
        client = OAuthClient(config(server, retries=2, retry_backoff_s=0.01), name="route r")
        with trio.fail_after(20):
            assert await server.active(await client.token())
        assert [e["ok"] for e in await server.log()] == [False, False, True]
        await client.aclose()
    async with token_server(tmp_path, "--fail-first", "5") as server:
        client = OAuthClient(config(server, retries=1, retry_backoff_s=0.01), name="prompt source docs")
        with trio.fail_after(20), pytest.raises(BackUnavailable, match="prompt source docs: .*HTTP 503"):
            await client.token()
        assert len(await server.log()) == 2
        await client.aclose()


async def test_token_exchange_sends_the_subject_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SUBJECT", "the-subject-token")
    async with token_server(tmp_path, "--subject-token", "the-subject-token") as server:
        cfg = config(server, grant="token_exchange", subject_token_env="TEST_SUBJECT", resource="https://agent.example/a2a")
        client = OAuthClient(cfg, name="route r")
        with trio.fail_after(20):
            assert await server.active(await client.token())
        (entry,) = await server.log()
        assert entry["grant"] == "urn:ietf:params:oauth:grant-type:token-exchange" and entry["ok"]
        assert entry["subject_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
        assert entry["resource"] == "https://agent.example/a2a"
        await client.aclose()


# -- the schedule, on trio's clock ------------------------------------------------------------


def _fake_endpoint(answers: list[dict[str, Any]], seen: list[dict[str, str]]) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(httpx.QueryParams(request.content.decode())))
        await trio.sleep(1)  # the endpoint takes a second: callers meanwhile wait for it
        return httpx.Response(200, json=answers[min(len(seen), len(answers)) - 1])

    return httpx.MockTransport(handler)


async def test_renewed_before_it_expires(autojump_clock: trio.testing.MockClock) -> None:
    cfg = msgspec.convert({"token_url": "http://auth.test/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET",
                           "expiry_margin_s": 30}, OAuthConfig)  # fmt: skip
    seen: list[dict[str, str]] = []
    answers = [{"access_token": "tok-1", "token_type": "bearer", "expires_in": 300}, {"access_token": "tok-2", "token_type": "Bearer"}]
    client = OAuthClient(cfg, name="route r")
    client._http = httpx.AsyncClient(transport=_fake_endpoint(answers, seen))
    assert await client.token() == "tok-1"
    got = trio.current_time()  # its life counts from the answer
    await trio.sleep(300 - 30 - 1)
    assert await client.token() == "tok-1" and len(seen) == 1
    await trio.sleep(1)
    assert await client.token() == "tok-2" and len(seen) == 2  # 30 s before expiry
    assert trio.current_time() - got == pytest.approx(300 - 30 + 1)  # + the second the endpoint took
    # No expires_in: default_lifetime_s (300), less the margin.
    await trio.sleep(300 - 30 - 1)
    assert await client.token() == "tok-2" and len(seen) == 2
    await client.aclose()


async def test_a_cancelled_leader_hands_over(autojump_clock: trio.testing.MockClock) -> None:
    cfg = msgspec.convert({"token_url": "http://auth.test/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET"}, OAuthConfig)
    seen: list[dict[str, str]] = []
    client = OAuthClient(cfg, name="route r")
    client._http = httpx.AsyncClient(transport=_fake_endpoint([{"access_token": "tok-1", "token_type": "Bearer"}], seen))
    got: list[str] = []
    leader = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancellable(client, leader))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(lambda: _into(client, got))
        await trio.testing.wait_all_tasks_blocked()
        leader.cancel()  # the turn that asked first is cancelled mid-request
    assert got == ["tok-1"] and len(seen) == 2  # the waiter asked again itself
    await client.aclose()


async def _cancellable(client: OAuthClient, scope: trio.CancelScope) -> None:
    with scope:
        await client.token()


async def _into(client: OAuthClient, got: list[str]) -> None:
    got.append(await client.token())


async def test_an_unusable_answer_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    cfg = msgspec.convert({"token_url": "http://auth.test/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET",
                           "retries": 0}, OAuthConfig)  # fmt: skip
    for answer, words in (({"access_token": "x", "token_type": "mac"}, "not a usable Bearer"),
                          ({"access_token": "bad\nvalue", "token_type": "Bearer"}, "not a usable Bearer"),
                          ({"token_type": "Bearer"}, "no usable token")):  # fmt: skip
        client = OAuthClient(cfg, name="route r")
        client._http = httpx.AsyncClient(transport=_fake_endpoint([answer], []))
        with pytest.raises(BackError, match=words):
            await client.token()
        await client.aclose()


# -- configuration ------------------------------------------------------------------------------


def _route(oauth: dict[str, Any], back: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"routes": {"r": {"back": back or {"kind": "a2a", "url": "http://127.0.0.1:9"}, "oauth": oauth}}}


def test_config_checks() -> None:
    good = {"token_url": "https://auth.example/token", "client_id": "c", "client_secret_file": "oauth-secret"}
    cfg = parse_config(_route(good))
    assert cfg.routes["r"].oauth is not None and cfg.routes["r"].oauth.files == ("oauth-secret",)
    for bad, words in (
        ({**good, "token_url": "ftp://x"}, "token_url"),
        ({"token_url": "https://a/t", "client_id": "c"}, "needs client_id and client_secret"),
        ({**good, "client_secret_env": "X"}, "not both"),
        ({"token_url": "https://a/t", "grant": "token_exchange"}, "subject_token"),
        ({**good, "resource": "not a uri"}, "absolute URI"),
        ({**good, "forward_identity_header": "Bad Header"}, "not a header name"),
        # The caller's subject would replace the token, or set the request's framing.
        ({**good, "forward_identity_header": "authorization"}, "the bridge sets"),
        ({**good, "forward_identity_header": "Content-Length"}, "the bridge sets"),
        ({**good, "forward_identity_header": "Transfer-Encoding"}, "the bridge sets"),
        ({**good, "client_secret": "inline"}, "unknown key"),
        # Each would have passed, then failed as the back or the prompt source made its
        # client (a prompt source's failure stopped the daemon).
        ({**good, "token_url": "https://auth.example:abc/token"}, "not a usable URL"),
        ({**good, "token_url": "https://[::1/token"}, "not a usable URL"),
        ({**good, "token_url": "https://auth.example:99999/token"}, "not a usable URL"),
        ({**good, "token_url": "https://@/token"}, "names no host"),
        ({**good, "token_url": "https://auth.example/tok\x7fen"}, "token_url"),
        ({**good, "token_url": "https://bridge:hunter2@auth.example/token"}, "holds credentials"),
    ):
        with pytest.raises(ConfigError, match=words):
            parse_config(_route(bad))
    with pytest.raises(ConfigError) as caught:
        parse_config(_route({**good, "token_url": "https://bridge:hunter2@auth.example/token"}))
    assert "hunter2" not in str(caught.value)
    source = {"name": "docs", "url": "http://127.0.0.1:9/mcp", "oauth": {**good, "token_url": "http://auth.example:abc/token"}}
    with pytest.raises(ConfigError, match="not a usable URL"):
        parse_config({"routes": {"r": {"back": {"kind": "demo"}}}, "prompt_sources": [source]})
    with pytest.raises(ConfigError, match="demo back takes no OAuth"):
        parse_config(_route(good, {"kind": "demo"}))
    with pytest.raises(ConfigError, match="token_env or token_file too"):
        parse_config(_route(good, {"kind": "a2a", "url": "http://127.0.0.1:9", "token_env": "T"}))


# -- the A2A back: the token and the caller on each call ------------------------------------------


async def test_the_a2a_back_sends_the_token_and_names_the_caller() -> None:
    from bridge.backs.a2a.http import CALLER, AgentHttp
    from bridge.core.identity import ANONYMOUS, Identity
    from bridge.transport.oauth import _Token

    oauth = {"token_url": "https://auth.example/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET",
             "forward_identity_header": "X-Forwarded-User"}  # fmt: skip
    route = parse_config(_route(oauth, {"kind": "a2a", "url": "https://agent.example/a2a", "headers": {"X-Team": "docs"}})).routes["r"]
    http = AgentHttp("r", route)
    assert http.oauth is not None and http.has_token()
    http.oauth._token = _Token("tok-1", float("inf"))
    headers, token = await http.auth("https://agent.example/a2a/v1")
    assert token == "tok-1" and headers == {"X-Team": "docs", "Authorization": "Bearer tok-1"}  # anonymous: not named
    CALLER.set(Identity(subject="ada@example.com", via="jwt", issuer="https://issuer.example"))
    headers, _ = await http.auth("https://agent.example/a2a")
    assert headers["X-Forwarded-User"] == "ada@example.com"
    CALLER.set(Identity(subject="Adá\r\nX-Evil: 1", via="token"))
    headers, _ = await http.auth("https://agent.example/a2a")
    assert headers["X-Forwarded-User"] == "Ad%C3%A1%0D%0AX-Evil%3A%201"  # never a header of its own
    CALLER.set(ANONYMOUS)
    with pytest.raises(BackError, match="not the configured origin"):
        await http.auth("https://elsewhere.example/a2a")  # the token stays with its agent
    # A 401 to that token forgets it; to another one (already renewed) does nothing.
    assert http.unauthorized(401, "tok-1") and http.oauth._token is None
    assert not http.unauthorized(403, "tok-1") and not http.unauthorized(401, None)
    await http.aclose()


def test_errors_name_the_token_endpoint_without_its_query() -> None:
    """A key may ride in a token URL's query (`?code=...`): the hint of a refused token,
    which reaches the turn's client, and the client's repr name the endpoint without it."""
    from bridge.backs.a2a.http import AgentHttp
    from bridge.backs.chat.server import ChatServer

    oauth = {"token_url": "https://auth.example/token?code=k3y-in-the-query", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET"}
    http = AgentHttp("r", parse_config(_route(oauth)).routes["r"])
    chat = ChatServer("r", parse_config(_route(oauth, {"kind": "chat", "url": "ws://127.0.0.1:9/ws"})).routes["r"])
    assert http.oauth is not None and chat.oauth is not None
    for said in (http._auth_hint(), chat.auth_hint(), repr(http.oauth)):
        assert "https://auth.example/token" in said and "k3y" not in said, said


async def test_a_server_echoing_the_secret_does_not_put_it_in_the_error(autojump_clock: trio.testing.MockClock) -> None:
    async def echo(request: httpx.Request) -> httpx.Response:
        import base64

        basic = request.headers["authorization"].split()[1]
        return httpx.Response(400, json={"error": "invalid_request", "error_description": f"bad: {base64.b64decode(basic).decode()}"})

    cfg = msgspec.convert({"token_url": "http://auth.test/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET"}, OAuthConfig)
    client = OAuthClient(cfg, name="route r")
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(echo))
    with pytest.raises(BackError) as caught:
        await client.token()
    assert SECRET not in caught.value.message and "bad: c:***" in caught.value.message, caught.value.message
    await client.aclose()

    async def echo_late(request: httpx.Request) -> httpx.Response:
        # The secret where the error's words are cut (200 characters): none of it is shown.
        return httpx.Response(401, json={"error": "x" * 60 + SECRET, "error_description": "y" * 190 + SECRET})

    client = OAuthClient(cfg, name="route r")
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(echo_late))
    with pytest.raises(BackError) as caught:
        await client.token()
    assert SECRET[:4] not in caught.value.message, caught.value.message
    await client.aclose()


async def test_the_chat_back_renews_a_token_its_socketio_server_refuses(tmp_path: Path) -> None:
    from bridge.backs.chat.link import check
    from bridge.backs.chat.server import ChatServer

    async with token_server(tmp_path) as server:
        peer = [sys.executable, str(SERVER.parent / "socketio_server.py"), "--introspect", server.url + "/introspect"]
        async with serve_peer(peer, tmp_path / "chat.log") as port:
            back = {"kind": "chat", "url": f"http://127.0.0.1:{port}/socket.io/", "dialect": "socketio"}
            oauth = {"token_url": server.url + "/token", "client_id": "bridge", "client_secret_env": "TEST_OAUTH_SECRET"}
            chat = ChatServer("r", parse_config(_route(oauth, back)).routes["r"])
            with trio.fail_after(30):
                first = (await chat.token()).reveal()  # type: ignore[union-attr]
                async with httpx.AsyncClient(trust_env=False) as h:
                    await h.post(server.url + "/_test/revoke")
                    # The CONNECT with the revoked token is refused: renewed, connected once more.
                    assert "Socket.IO (namespace /) connected" in await check(chat)
                    log = (await h.get(f"http://127.0.0.1:{port}/_test/log")).json()
            assert [e["kind"] for e in log if e["kind"] in ("connect", "refused")] == ["connect", "refused", "connect"], log
            assert (await chat.token()).reveal() != first  # type: ignore[union-attr]
            assert len(await server.log()) == 2
            await chat.aclose()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_answers = st.one_of(
    st.binary(max_size=200),
    _json.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"access_token": st.text(max_size=40) | _json, "token_type": st.sampled_from(["Bearer", "bearer", "mac", ""]) | _json},
        optional={"expires_in": st.floats(allow_nan=True) | st.integers() | _json, "refresh_token": st.text(max_size=20) | _json},
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=100, deadline=None)
@given(status=st.sampled_from([200, 200, 200, 400, 401, 403, 500, 503]), body=_answers,
       encoding=st.sampled_from([None, None, "gzip", "deflate", "br", "identity"]))  # fmt: skip
def test_any_token_endpoint_answer_is_a_usable_token_or_a_back_error(status: int, body: bytes, encoding: str | None) -> None:
    """What a token endpoint answers is untrusted: any status, Content-Encoding and bytes
    give a token a header can carry, or a BackError; never another exception, never a hang."""

    async def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json", **({"content-encoding": encoding} if encoding else {})}
        return httpx.Response(status, content=body, headers=headers)

    async def main() -> None:
        cfg = msgspec.convert({"token_url": "http://auth.test/token", "client_id": "c", "client_secret_env": "TEST_OAUTH_SECRET",
                               "retries": 1, "retry_backoff_s": 0.01}, OAuthConfig)  # fmt: skip
        client = OAuthClient(cfg, name="route r")
        client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            with trio.fail_after(60):
                token = await client.token()
            assert token and token.isascii() and token.isprintable()
        except BackError as exc:
            assert "route r" in exc.message
        finally:
            await client.aclose()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
