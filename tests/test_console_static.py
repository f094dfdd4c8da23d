"""The web console's files (bridge/fronts/console.py): what `GET /` and `/console/{name}` answer.

In process, through the daemon's own `HttpApp` (the browser-safety policy included):
content types, the strict CSP and the other safety headers on every answer, ETag
revalidation (304), HEAD, unknown names and traversal attempts (404, never a file
outside the table), and the URL `serve` prints. The pages themselves are driven in a
real browser by the console's browser tests.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bridge.fronts import console
from bridge.fronts.http import HttpApp

STATIC = Path(console.__file__).resolve().parent.parent / "console" / "static"


async def call(app: HttpApp, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    raw = [(b"host", b"127.0.0.1:8765"), *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
    scope = {"type": "http", "method": method, "path": path, "headers": raw, "server": ("127.0.0.1", 8765), "query_string": b""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    got = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], got, b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def app() -> HttpApp:
    app = HttpApp()
    console.register(app)
    return app


def assert_safe(headers: dict[str, str]) -> None:
    csp = headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
                      "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"):  # fmt: skip
        assert directive in csp, directive
    assert "unsafe" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


async def test_the_page_and_its_files_with_their_types_and_safety_headers(app: HttpApp) -> None:
    status, headers, body = await call(app, "GET", "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert_safe(headers)
    assert headers["cache-control"] == "no-cache" and re.fullmatch(r'"[0-9a-f]{32}"', headers["etag"])
    assert int(headers["content-length"]) == len(body) and body == (STATIC / "index.html").read_bytes()
    page = body.decode()
    # Every file the page names is served, with its type: nothing inline, nothing elsewhere.
    assert "<style" not in page and "style=" not in page and re.search(r"<script>[^<]", page) is None
    for name, kind in (("app.js", "text/javascript; charset=utf-8"), ("console.css", "text/css; charset=utf-8")):
        assert f"/console/{name}" in page
        status, headers, body = await call(app, "GET", f"/console/{name}")
        assert (status, headers["content-type"]) == (200, kind) and body == (STATIC / name).read_bytes()
        assert_safe(headers)
    # Every module an ES module imports is one of ours, served the same way.
    for module in STATIC.glob("*.js"):
        for imported in re.findall(r'from "\./([\w.-]+)"', module.read_text()):
            status, headers, _ = await call(app, "GET", f"/console/{imported}")
            assert (status, headers["content-type"]) == (200, "text/javascript; charset=utf-8"), (module.name, imported)


async def test_revalidation_answers_304_without_a_body(app: HttpApp) -> None:
    _, headers, _ = await call(app, "GET", "/console/app.js")
    etag = headers["etag"]
    for value in (etag, f'"other", {etag}', f"W/{etag}", "*"):
        status, again, body = await call(app, "GET", "/console/app.js", {"if-none-match": value})
        assert (status, body, again["etag"]) == (304, b"", etag), value
        assert_safe(again)
    status, _, body = await call(app, "GET", "/console/app.js", {"if-none-match": '"stale"'})
    assert status == 200 and body
    # Each file has its own tag: a changed file is fetched again.
    _, css, _ = await call(app, "GET", "/console/console.css")
    assert css["etag"] != etag


async def test_head_answers_the_headers_only(app: HttpApp) -> None:
    _, full, body = await call(app, "GET", "/")
    status, headers, nothing = await call(app, "HEAD", "/")
    assert (status, nothing) == (200, b"")
    assert headers["content-length"] == str(len(body)) and headers["etag"] == full["etag"]
    assert_safe(headers)


@pytest.mark.parametrize(
    "path",
    [
        "/console/nope.js",
        "/console/..",
        "/console/%2e%2e%2fbridge%2fconfig.py",  # hypercorn decodes the path: a name, not a route
        "/console/../fronts/console.py",
        "/console/static/app.js",
        "/console/.hidden",
        "/console/",
        "/index.html",
        "/console/app.js/",
    ],
)
async def test_only_the_files_of_the_table_are_served(app: HttpApp, path: str) -> None:
    status, headers, body = await call(app, "GET", path)
    assert status == 404, path
    assert b"import" not in body and b"def " not in body
    if path.startswith("/console/") and path.count("/") == 2 and path != "/console/":
        assert_safe(headers)  # our own 404: still a page that may run nothing


def test_the_table_holds_regular_files_only_and_no_hidden_or_nested_ones(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / ".secret").write_text("no")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.js").write_text("no")
    (tmp_path / "link.js").symlink_to(tmp_path / ".secret")
    (tmp_path / "a.weird").write_bytes(b"\x00")
    assets = console.load_assets(tmp_path)
    assert sorted(assets) == ["a.weird", "index.html"]
    assert assets["a.weird"].content_type == "application/octet-stream"
    shipped = console.load_assets()
    assert {"index.html", "app.js", "console.css"} <= set(shipped)


def test_the_console_url_that_serve_prints() -> None:
    assert console.console_url(["http://127.0.0.1:8765", "unix:/run/acp.sock"]) == "http://127.0.0.1:8765/"
    assert console.console_url(["http://0.0.0.0:9000"]) == "http://127.0.0.1:9000/"
    assert console.console_url(["http://[::]:9000"]) == "http://[::1]:9000/"
    assert console.console_url(["http://[::1]:9000"]) == "http://[::1]:9000/"
    assert console.console_url(["unix:/run/acp.sock"]) is None
