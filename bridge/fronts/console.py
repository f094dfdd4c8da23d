"""The web console: static files shipped in the package, served at `/` and `/console/{name}`.

The console is a page of plain ES modules and CSS (`bridge/console/static/`) that speaks
only the public HTTP APIs (chat REST, the canonical events SSE, `/metrics`), so it holds
no data itself and needs no token to load; the token guards the APIs it calls.

Files are read once at start-up into a table (path → bytes, type, ETag): a request names
a key of that table or gets 404, so no path a client sends ever reaches the file system
(no traversal, no symlink, no file added later). Every answer carries a strict Content
Security Policy (CSP Level 3 §6: scripts and styles only from this origin, no inline
code, no framing, no form posts, no remote images), `X-Content-Type-Options: nosniff`
(Fetch §3.5) and `Referrer-Policy: no-referrer`; files are revalidated on every load
(`Cache-Control: no-cache`, RFC 9111 §5.2.2.4) against a strong ETag, answered 304 when
it matches `If-None-Match` (RFC 9110 §13.1.2). HEAD answers the same headers, no body.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.fronts.http import HttpApp, Scope, header, send_json

__all__ = ["CSP", "Asset", "console_url", "load_assets", "register"]

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",  # RFC 9239 §6
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
_MAX_FILES = 256  # the console is a handful of files; a bound on what start-up reads


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = STATIC) -> dict[str, Asset]:
    """Every regular file directly in `root`, keyed by its name ("index.html", "app.js").

    One flat directory: a name is one path segment (`/console/{path}` matches no "/"),
    and a module's relative imports (`./api.js`) stay within it."""
    assets: dict[str, Asset] = {}
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.is_symlink() or path.name.startswith("."):
            continue
        if len(assets) >= _MAX_FILES:
            raise RuntimeError(f"more than {_MAX_FILES} files under the console's static directory")
        body = path.read_bytes()
        kind = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        assets[path.name] = Asset(body, kind, etag)
    return assets


def _fresh(scope: Scope, etag: str) -> bool:
    """`If-None-Match` names this ETag (a list, weak or strong, or "*": RFC 9110 §13.1.2)."""
    value = header(scope, "if-none-match")
    if value is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in value.split(",")]
    return "*" in tags or etag in tags


class _Console:
    __slots__ = ("assets",)

    def __init__(self, assets: dict[str, Asset]) -> None:
        self.assets = assets

    async def index(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        await self._send(scope, send, "index.html")

    async def file(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        await self._send(scope, send, params["path"])

    async def _send(self, scope: Scope, send: Any, name: str) -> None:
        asset = self.assets.get(name)
        if asset is None:
            await send_json(send, 404, {"detail": f"no such console file: {name[:200]}"}, headers=_SAFE)
            return
        headers = [
            (b"etag", asset.etag.encode()),
            (b"cache-control", b"no-cache"),
            *_SAFE_RAW,
        ]
        if _fresh(scope, asset.etag):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers += [(b"content-type", asset.content_type.encode()), (b"content-length", str(len(asset.body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else asset.body})


_SAFE = [("content-security-policy", CSP), ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer")]
_SAFE_RAW = [(k.encode(), v.encode()) for k, v in _SAFE]


def register(app: HttpApp, root: Path = STATIC) -> None:
    """`GET /` (the page) and `GET /console/{path}` (its modules and styles)."""
    console = _Console(load_assets(root))
    for method in ("GET", "HEAD"):
        app.add(method, "/", console.index, public=True)  # static files; the API calls they make are not public
        app.add(method, "/console/{path}", console.file, public=True)


def console_url(bound: list[str]) -> str | None:
    """Where a browser on this machine opens the web console: the first HTTP listener,
    a wildcard address named by its loopback (the Host a loopback listener accepts)."""
    url = next((b for b in bound if b.startswith("http://")), None)
    if url is None:
        return None
    host, _, port = url.removeprefix("http://").rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
    return f"http://{host}:{port}/"
