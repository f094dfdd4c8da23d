"""`GET /api/openapi.json` and `GET /api/asyncapi.json`: the daemon's API descriptions.

They describe, they expose nothing (no session, no route name, no token), so like the
web console's files (bridge/fronts/console.py) they need no token; the listener's one
browser policy (bridge/fronts/http_policy.py: Host, Origin) still applies before them,
and a page on an origin the operator did not name cannot read them.

Each document is built on its first request (bridge/fronts/openapi.py, asyncapi.py:
~50 ms of schema generation no start-up should pay) and kept as bytes with a strong
ETag; `If-None-Match` gets 304 (RFC 9110 §13.1.2). The AsyncAPI server's `host` is the
request's `Host` (already checked by the policy), so a tool pointed at the document
reaches the daemon that served it; at most `_HOSTS` variants are kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from bridge.fronts.http import HttpApp, Scope, header

__all__ = ["register"]

_HOSTS = 16
_enc = msgspec.json.Encoder()
_SAFE = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-cache")]


class _Document:
    __slots__ = ("build", "per_host", "doc", "cache")

    def __init__(self, build: Callable[[], dict[str, Any]], *, per_host: bool) -> None:
        self.build = build
        self.per_host = per_host
        self.doc: dict[str, Any] | None = None
        self.cache: dict[str, tuple[bytes, str]] = {}

    def body(self, host: str | None) -> tuple[bytes, str]:
        key = (host or "")[:255] if self.per_host else ""  # a Host is at most a DNS name and a port
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if self.doc is None:
            self.doc = self.build()
        doc = self.doc
        if key:
            doc = {**doc, "servers": {n: {**s, "host": key} for n, s in doc["servers"].items()}}
        body = _enc.encode(doc)
        if len(self.cache) >= _HOSTS:
            self.cache.clear()
        hit = self.cache[key] = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        return hit

    async def __call__(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        body, etag = self.body(header(scope, "host"))
        headers = [(b"etag", etag.encode()), *_SAFE]
        match = header(scope, "if-none-match")
        if match is not None and ("*" in match or etag in [t.strip().removeprefix("W/") for t in match.split(",")]):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


def _openapi() -> dict[str, Any]:
    from bridge.fronts.openapi import build_openapi

    return build_openapi()


def _asyncapi() -> dict[str, Any]:
    from bridge.fronts.asyncapi import build_asyncapi

    return build_asyncapi()


def register(app: HttpApp) -> None:
    openapi, asyncapi = _Document(_openapi, per_host=False), _Document(_asyncapi, per_host=True)
    for method in ("GET", "HEAD"):
        app.add(method, "/api/openapi.json", openapi)
        app.add(method, "/api/asyncapi.json", asyncapi)
