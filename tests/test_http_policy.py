"""The one browser-safety policy of every HTTP front (bridge/fronts/http_policy.py).

Unit tests of the policy (Host, Origin, Content-Type, case by case), of `HttpApp`
enforcing it before any handler, then end to end against the real daemon: the A2A
front no longer runs a turn for a cross-site "simple" POST or answers a rebound Host,
and /ws, REST, A2A and /mcp refuse a foreign Origin alike.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from bridge.config import ServerConfig
from bridge.fronts.http import HttpApp
from bridge.fronts.http_policy import BrowserPolicy, is_loopback_host, origin_host

LOOP = ("127.0.0.1", 8765)


def scope(
    method: str = "GET",
    *,
    host: str | None = "127.0.0.1:8765",
    origin: str | None = None,
    ctype: str | None = None,
    length: int | None = None,
    server: tuple[str, int] | None = LOOP,
    kind: str = "http",
) -> dict[str, Any]:
    headers = []
    for name, value in (("host", host), ("origin", origin), ("content-type", ctype)):
        if value is not None:
            headers.append((name.encode(), value.encode("latin-1")))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    s: dict[str, Any] = {"type": kind, "path": "/x", "headers": headers, "server": server}
    if kind == "http":
        s["method"] = method
    return s


def policy(**server: Any) -> BrowserPolicy:
    return BrowserPolicy(ServerConfig(**server))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("LOCALHOST.", True), ("app.localhost", True), ("127.0.0.1", True), ("127.3.4.5", True),
     ("[::1]", True), ("::1", True), ("0.0.0.0", False), ("10.0.0.1", False), ("localhost.evil.com", False),
     ("127.0.0.1.nip.io", False), ("attacker.example", False), ("", False)],
)  # fmt: skip
def test_loopback_names(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("origin", "host"),
    [("http://localhost:5173", "localhost"), ("https://[::1]:8443", "[::1]"), ("http://a.example", "a.example"),
     ("null", None), ("file://", None), ("ftp://localhost", None), ("http://a.example/path", None)],
)  # fmt: skip
def test_origin_host(origin: str, host: str | None) -> None:
    assert origin_host(origin) == host


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8765", "localhost", "localhost:1", "[::1]:8765", "127.0.0.2", "LocalHost:80", None]
)
def test_loopback_listener_accepts_loopback_hosts(host: str | None) -> None:
    assert policy().check(scope(host=host)) is None


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8765", "10.1.2.3:8765", "localhost.attacker.example"])
def test_loopback_listener_refuses_other_hosts_dns_rebinding(host: str) -> None:
    status, detail = policy().check(scope(host=host))  # type: ignore[misc]
    assert status == 421 and "allowed_hosts" in detail


def test_loopback_listener_judged_by_the_connections_own_address() -> None:
    for server in (("127.0.0.1", 1), ("::1", 1), ("127.9.9.9", 1), ("localhost", 1)):
        assert policy().check(scope(host="attacker.example", server=server)) is not None
    # not loopback (or a unix socket): Host is not checked unless allowed_hosts is set
    for server in (("10.0.0.5", 8765), ("/run/bridge.sock", None), None):  # type: ignore[assignment]
        assert policy().check(scope(host="bridge.example.com", server=server)) is None  # type: ignore[arg-type]


def test_allowed_hosts_exact_and_wildcard() -> None:
    p = policy(allowed_hosts=["bridge.example.com", "*.corp.example", "[fd00::1]"])
    for host in ("bridge.example.com", "bridge.example.com:443", "BRIDGE.example.com", "a.corp.example:1",
                 "a.b.corp.example", "[fd00::1]:80", "localhost:8765"):  # fmt: skip
        assert p.check(scope(host=host)) is None, host
    for host in ("corp.example", "xcorp.example", "evil.example.com", "bridge.example.com.evil"):
        assert p.check(scope(host=host)) is not None, host
    # on a public listener, a set allowed_hosts applies too
    assert p.check(scope(host="evil.example", server=("10.0.0.5", 80))) is not None
    assert p.check(scope(host="a.corp.example", server=("10.0.0.5", 80))) is None


@pytest.mark.parametrize(
    "origin", ["http://localhost:5173", "http://127.0.0.1:8765", "https://[::1]", "http://localhost:5173/"]
)
def test_loopback_origins_allowed(origin: str) -> None:
    assert policy().check(scope(origin=origin)) is None


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "http://localhost.evil.example", "http://127.0.0.1.evil.example", "garbage"]
)
def test_foreign_origins_refused(origin: str) -> None:
    status, detail = policy().check(scope(origin=origin))  # type: ignore[misc]
    assert status == 403 and "allowed_origins" in detail


def test_allowed_origins_server_wide_per_front_and_any() -> None:
    p = policy(allowed_origins=["https://chat.example.com"])
    assert p.check(scope(origin="https://chat.example.com")) is None
    assert p.check(scope(origin="https://CHAT.example.com/")) is None
    assert p.check(scope(origin="http://chat.example.com")) is not None  # scheme counts
    extra = frozenset({"https://tools.example"})
    assert p.check(scope(origin="https://tools.example"), extra) is None
    assert p.check(scope(origin="https://tools.example")) is not None
    assert policy(allowed_origins=["*"]).check(scope(origin="https://anything.example")) is None
    assert p.check(scope(origin="null"), frozenset({"*"})) is None
    # listed (CORS-worthy) is narrower than allowed: a loopback page may call, not read
    assert not p.origin_listed("http://localhost:3000") and p.origin_listed("https://chat.example.com")


@pytest.mark.parametrize(
    ("method", "ctype", "length", "ok"),
    [("POST", "application/json", 10, True), ("POST", "application/json; charset=utf-8", 10, True),
     ("POST", "Application/JSON", 10, True), ("POST", "application/a2a+json", 10, True),
     ("POST", "text/plain", 10, False), ("POST", None, 10, False), ("POST", None, None, True), ("POST", None, 0, True),
     ("POST", "application/x-www-form-urlencoded", 10, False), ("POST", "multipart/form-data; boundary=x", 10, False),
     ("POST", "text/plain; a=application/json", 10, False), ("PUT", "text/plain", 1, False),
     ("PATCH", None, 1, False), ("DELETE", None, None, True), ("DELETE", None, 0, True),
     ("DELETE", "text/plain", 5, False), ("DELETE", "application/json", 5, True), ("GET", None, None, True),
     ("GET", "text/plain", 3, True), ("OPTIONS", None, None, True)],
)  # fmt: skip
def test_state_changing_requests_need_json(method: str, ctype: str | None, length: int | None, ok: bool) -> None:
    refusal = policy().check(scope(method, ctype=ctype, length=length))
    assert (refusal is None) is ok
    if not ok:
        assert refusal is not None and refusal[0] == 415


def test_websocket_upgrade_checks_host_and_origin_not_content_type() -> None:
    assert policy().check(scope(kind="websocket")) is None
    assert policy().check(scope(kind="websocket", origin="https://evil.example"))[0] == 403  # type: ignore[index]
    assert policy().check(scope(kind="websocket", host="evil.example"))[0] == 421  # type: ignore[index]


# -- HttpApp runs it before any handler ------------------------------------------------------


async def _call(app: HttpApp, s: dict[str, Any]) -> tuple[int | None, dict[str, Any], list[str]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"} if s["type"] == "websocket" else {"type": "http.request", "body": b"{}"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(s, receive, send)
    start = next((m for m in sent if m["type"].endswith("response.start") or m["type"] == "websocket.close"), {})
    body = b"".join(m.get("body", b"") for m in sent if m["type"].endswith("response.body"))
    return start.get("status", start.get("code")), json.loads(body or b"{}"), [m["type"] for m in sent]


async def test_http_app_refuses_before_the_handler() -> None:
    ran: list[str] = []

    async def handler(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        ran.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def ws_handler(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        ran.append("ws")

    app = HttpApp(policy())
    app.add("POST", "/x", handler)
    app.add("GET", "/own", handler, origins=["https://chat.example"])
    app.websocket("/ws", ws_handler, origins=["https://chat.example"])
    with trio.fail_after(5):
        for ctype in ("text/plain", None):
            status, body, _ = await _call(app, scope("POST", ctype=ctype, length=2))
            assert status == 415 and "application/json" in body["detail"]
        status, body, _ = await _call(app, scope("POST", host="attacker.example", ctype="application/json", length=2))
        assert status == 421 and "DNS rebinding" in body["detail"]
        assert (await _call(app, scope("POST", origin="https://evil.example", ctype="application/json", length=2)))[0] == 403
        # an unknown path answers no 404 to a page that may not ask
        assert (await _call(app, {**scope(origin="https://evil.example"), "path": "/nope"}))[0] == 403
        assert ran == []
        # a front's own origins count only on its own paths
        assert (await _call(app, {**scope(origin="https://chat.example"), "path": "/own"}))[0] == 200
        assert (await _call(app, scope("POST", origin="https://chat.example", ctype="application/json", length=2)))[0] == 403
        ws = {**scope(kind="websocket", origin="https://evil.example"), "path": "/ws", "extensions": {"websocket.http.response": {}}}
        status, body, types = await _call(app, ws)
        assert status == 403 and "allowed_origins" in body["detail"] and "websocket.accept" not in types
        ws_plain = {**scope(kind="websocket", host="evil.example"), "path": "/ws"}
        assert (await _call(app, ws_plain))[2] == ["websocket.close"]
        assert ran == ["/own"]
        await _call(app, {**scope(kind="websocket", origin="https://chat.example"), "path": "/ws"})
        assert (await _call(app, scope("POST", ctype="application/json", length=2)))[0] == 200
        assert ran == ["/own", "ws", "/x"]


# -- end to end: the real daemon --------------------------------------------------------------

EVIL = "https://evil.example"
LISTED = "https://chat.example.com"
V03_SEND = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
    "message": {"kind": "message", "messageId": "m-x", "role": "user", "parts": [{"kind": "text", "text": "pwned"}]}}}  # fmt: skip
LIST_TASKS = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}
MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
MCP_ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def _sessions(h: Any) -> int:
    r = await h.get("/api/sessions")
    assert r.status_code == 200, r.text
    return int(r.json()["total"])


async def test_daemon_refuses_cross_site_and_rebound_requests_on_every_front(
    bridge_exe: list[str], tmp_path: Any, clean_env: dict[str, str]
) -> None:
    import httpx
    from trio_websocket import ConnectionRejected, open_websocket_url

    from daemon_support import base_config, demo_route, start_daemon

    config = base_config(tmp_path, {"demo": demo_route()}, server={"allowed_origins": [LISTED]})
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=10) as h:
            body = json.dumps(V03_SEND).encode()
            # A "simple" cross-site POST (finding 3): text/plain, or no Content-Type at all.
            for headers in ({"content-type": "text/plain"}, {}, {"content-type": "application/x-www-form-urlencoded"}):
                r = await h.post("/a2a/demo", content=body, headers=headers)
                assert r.status_code == 415, (headers, r.text)
                assert "application/json" in r.json()["error"]["message"]
            r = await h.post("/a2a/demo", content=body, headers={"content-type": "text/plain", "origin": EVIL})
            assert r.status_code == 403
            assert await _sessions(h) == 0  # no turn ran
            assert "pwned" not in d.log_text()

            # DNS rebinding: the attacker's name resolves to 127.0.0.1, the Host header says so.
            for host in ("attacker.example", "attacker.example:80"):
                r = await h.post("/a2a/demo", json=LIST_TASKS, headers={"a2a-version": "1.0", "host": host})
                assert r.status_code == 421 and "DNS rebinding" in r.json()["error"]["message"], r.text
                r = await h.get("/a2a/demo/tasks", headers={"a2a-version": "1.0", "host": host})
                assert r.status_code == 421 and "result" not in r.text
                assert (await h.get("/api/sessions", headers={"host": host})).status_code == 421

            # The same requests, as a real client makes them, are served.
            r = await h.post("/a2a/demo", json=V03_SEND)
            assert r.status_code == 200 and r.json()["result"]["status"]["state"] == "completed", r.text
            r = await h.post("/a2a/demo", json=LIST_TASKS, headers={"a2a-version": "1.0", "host": "localhost:1"})
            assert r.status_code == 200 and len(r.json()["result"]["tasks"]) == 1, r.text
            assert await _sessions(h) == 1

            # A foreign Origin is refused alike on A2A, REST, /mcp and /ws; loopback and listed pass.
            for origin, ok in ((EVIL, False), ("null", False), ("http://localhost:5173", True), (LISTED, True)):
                o = {"origin": origin}
                r = await h.post("/a2a/demo", json=LIST_TASKS, headers={"a2a-version": "1.0", **o})
                assert (r.status_code == 200) is ok, (origin, r.text)
                r = await h.get("/a2a/demo/.well-known/agent-card.json", headers=o)
                assert (r.status_code == 200) is ok, (origin, r.text)
                r = await h.get("/api/sessions", headers=o)
                assert (r.status_code == 200) is ok, (origin, r.text)
                # CORS headers only for the origin the operator named
                assert ("access-control-allow-origin" in r.headers) is (origin == LISTED)
                r = await h.post("/mcp", json=MCP_INIT, headers={**MCP_ACCEPT, **o})
                assert (r.status_code == 200) is ok, (origin, r.text)
                if not ok:
                    assert r.status_code == 403 and r.json()["error"]["code"] == -32600
                try:
                    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", extra_headers=[(b"origin", origin.encode())]):
                        pass  # the upgrade was accepted
                    assert ok, origin
                except ConnectionRejected as exc:
                    assert not ok and exc.status_code == 403, origin
                    assert "allowed_origins" in json.loads(exc.body or b"{}")["detail"]
            assert await _sessions(h) == 1


# -- leaks (finding 11) -----------------------------------------------------------------------

ADMIN = "adm-Tok3n-for-tests"


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_readyz_metrics_push_configs_and_logs_keep_secrets(
    bridge_exe: list[str], tmp_path: Any, clean_env: dict[str, str]
) -> None:
    import os
    import stat

    import httpx

    from daemon_support import base_config, demo_route, start_daemon

    far = {"back": {"kind": "a2a", "url": "http://127.0.0.1:9/far-SECRET-path/agent", "connect_timeout_s": 1}}
    config = base_config(
        tmp_path, {"demo": demo_route(), "far": far},
        server={"admin_token_env": "BRIDGE_ADMIN_TOKEN", "metrics_need_token": True},
        daemon={"probe_interval_s": 0, "probe_timeout_s": 2},
        a2a={"push_allowed_hosts": ["127.0.0.1"], "push_max_attempts": 1},
    )  # fmt: skip
    admin = {"authorization": f"Bearer {ADMIN}"}
    v10 = {"a2a-version": "1.0"}
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"BRIDGE_ADMIN_TOKEN": ADMIN}) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=10) as h:
                # /readyz: anyone learns ready or not, nothing else
                r = await h.get("/readyz")
                assert r.status_code == 200 and r.json() == {"status": "ready"}, r.text
                assert (await h.get("/readyz", headers={"authorization": "Bearer wrong"})).status_code == 401
                r = await h.get("/readyz", headers=admin)
                assert r.status_code == 200 and r.json()["routes"]["far"]["status"] == "FAILED", r.text
                assert "far-SECRET-path" in r.text or "127.0.0.1:9" in r.text
                # /metrics behind the same token (metrics_need_token)
                for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": ADMIN}):
                    r = await h.get("/metrics", headers=headers)
                    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer") and "agent_bridge" not in r.text
                r = await h.get("/metrics", headers=admin)
                assert r.status_code == 200 and "agent_bridge_" in r.text

                # Push configs: a refused webhook is logged as its origin; answers carry no credentials.
                r = await h.post("/a2a/demo", json=_rpc("SendMessage", {"message": {
                    "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}), headers=v10)  # fmt: skip
                task_id = r.json()["result"]["task"]["id"]
                bad = "http://user:pw-SECRET@evil.example:9/hook/path-SECRET?key=query-SECRET"
                r = await h.post("/a2a/demo", json=_rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": bad}), headers=v10)
                assert "error" in r.json() and "http://evil.example:9" in r.json()["error"]["message"], r.text
                hook = {"taskId": task_id, "id": "h1", "url": "http://127.0.0.1:9/hook/p2-SECRET?k=q2-SECRET", "token": "tok-SECRET",
                        "authentication": {"scheme": "Bearer", "credentials": "cred-SECRET"}}  # fmt: skip
                created = await h.post("/a2a/demo", json=_rpc("CreateTaskPushNotificationConfig", hook), headers=v10)
                got = await h.post("/a2a/demo", json=_rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "h1"}), headers=v10)
                listed = await h.post("/a2a/demo", json=_rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}), headers=v10)
                rest = await h.get(f"/a2a/demo/tasks/{task_id}/pushNotificationConfigs", headers=v10)
                for answer in (created, got, listed, rest):
                    assert answer.status_code == 200 and "h1" in answer.text, answer.text
                    assert "tok-SECRET" not in answer.text and "cred-SECRET" not in answer.text, answer.text
                assert got.json()["result"]["authentication"]["scheme"] == "Bearer"
        log = d.log_text()
    for secret in ("pw-SECRET", "path-SECRET", "query-SECRET", "tok-SECRET", "cred-SECRET", ADMIN):
        assert secret not in log, secret
    assert "evil.example:9" in log  # the refusal is logged, as an origin
    # The store's files are the owner's alone.
    files = list((tmp_path / "state").glob("bridge.sqlite3*"))
    assert files
    for path in files:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


async def test_an_older_world_readable_store_is_narrowed_to_0600(tmp_path: Any) -> None:
    import os
    import sqlite3
    import stat

    from bridge.store import open_store

    db = tmp_path / "bridge.sqlite3"
    sqlite3.connect(db).close()
    os.chmod(db, 0o644)
    store = open_store(str(tmp_path))
    with trio.fail_after(20):
        await store.open()
        try:
            names = sorted(p.name for p in tmp_path.glob("bridge.sqlite3*"))
            assert "bridge.sqlite3-wal" in names  # WAL mode: created at open, with the database's mode
            for name in names:
                assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name
        finally:
            await store.close()


def test_httpx_never_logs_whole_urls() -> None:
    import logging

    from bridge import logs

    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    try:
        logs.setup("debug")
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)  # "HTTP Request: POST <whole URL>"
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
        logging.getLogger("httpx").setLevel(saved[2])


def test_an_ipv4_mapped_loopback_address_is_loopback() -> None:
    """A dual-stack listener ("[::]") sees 127.0.0.1 as ::ffff:127.0.0.1: the Host rule
    must still apply there, or a rebound name reaching it would pass."""

    assert is_loopback_host("::ffff:127.0.0.1") and is_loopback_host("[::ffff:127.0.0.1]")
    assert not is_loopback_host("::ffff:10.0.0.1")
    policy = BrowserPolicy(ServerConfig())
    scope = {"type": "http", "method": "GET", "server": ("::ffff:127.0.0.1", 8765),
             "headers": [(b"host", b"attacker.example")]}  # fmt: skip
    refusal = policy.check(scope)
    assert refusal is not None and refusal[0] == 421
