"""A small OAuth 2 authorization server (starlette under uvicorn), run as its own process.

    python oauth_server.py --client ID:SECRET [--client ...] [--expires-in S] [--refresh]
                           [--subject-token T] [--fail-first N]

It binds 127.0.0.1 on a port the OS picks and prints `PORT <n>`. Endpoints:

- `POST /token` (RFC 6749 §3.2): grants `client_credentials` (§4.4), `refresh_token`
  (§6, when started with --refresh) and token exchange (RFC 8693 §2.1, the subject
  token must be --subject-token). Clients authenticate with HTTP Basic or in the form
  (§2.3.1); a wrong one gets 401 `invalid_client` (§5.2). Tokens live --expires-in
  seconds (default 3600). --fail-first N: the first N token requests answer 503.
- `POST /introspect` (RFC 7662 §2): `{"active": bool, "client_id", "sub"}` for `token=`;
  the test agents (a2a_agent.py, socketio_server.py, mcp_prompts_server.py) ask it.
- `POST /_test/revoke`: every token issued so far stops being active (not the refresh tokens).
- `GET /_test/wait-expired?token=T` (or `?scope=S`: every token issued for scope S):
  answers once it has expired (a long poll: the test waits on the server's own clock,
  not on a sleep of its own).
- `GET /_test/log`: every token request: grant, client, ok, the form's other keys.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import secrets
import socket
import sys
import time
from typing import Any
from urllib.parse import unquote

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", action="append", default=[], help="ID:SECRET")
    ap.add_argument("--expires-in", type=float, default=3600)
    ap.add_argument("--refresh", action="store_true")
    ap.add_argument("--subject-token", default=None)
    ap.add_argument("--fail-first", type=int, default=0)
    args = ap.parse_args()
    clients = dict(c.split(":", 1) for c in args.client)
    tokens: dict[str, dict[str, Any]] = {}  # access token -> {client, sub, exp}
    refresh: dict[str, str] = {}  # refresh token -> client
    log: list[dict[str, Any]] = []
    failures = {"left": args.fail_first}

    def client_of(request: Request, form: dict[str, str]) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            try:
                cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return None
            cid, secret = unquote(cid), unquote(secret)
        else:
            cid, secret = form.get("client_id", ""), form.get("client_secret", "")
        return cid if cid in clients and clients[cid] == secret else None

    def issue(cid: str, sub: str, scope: str = "") -> dict[str, Any]:
        token = secrets.token_urlsafe(24)
        tokens[token] = {"client": cid, "sub": sub, "exp": time.monotonic() + args.expires_in, "scope": scope}
        out: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": args.expires_in}
        if args.refresh:
            r = secrets.token_urlsafe(24)
            refresh[r] = cid
            out["refresh_token"] = r
        return out

    async def token(request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        grant = form.get("grant_type", "")
        entry: dict[str, Any] = {"grant": grant, "ok": False, "keys": sorted(k for k in form if k not in ("client_secret",))}
        entry.update({k: form[k] for k in ("scope", "audience", "resource", "subject_token_type") if k in form})
        log.append(entry)
        if failures["left"] > 0:
            failures["left"] -= 1
            return JSONResponse({"error": "temporarily_unavailable"}, status_code=503)
        cid = client_of(request, form)
        entry["client"] = cid
        if grant == "client_credentials":
            if cid is None:
                return JSONResponse({"error": "invalid_client", "error_description": "unknown client or wrong secret"}, status_code=401)
            entry["ok"] = True
            return JSONResponse(issue(cid, f"client:{cid}", form.get("scope", "")))
        if grant == "refresh_token":
            owner = refresh.pop(form.get("refresh_token", ""), None)
            if owner is None or owner != cid:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            entry["ok"] = True
            return JSONResponse(issue(owner, f"client:{owner}", form.get("scope", "")))
        if grant == TOKEN_EXCHANGE:
            if args.subject_token is None or form.get("subject_token") != args.subject_token:
                return JSONResponse({"error": "invalid_grant", "error_description": "bad subject token"}, status_code=400)
            entry["ok"] = True
            out = issue(cid or "public", "exchanged")
            out["issued_token_type"] = "urn:ietf:params:oauth:token-type:access_token"
            return JSONResponse(out)
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    async def introspect(request: Request) -> Response:
        form = await request.form()
        info = tokens.get(str(form.get("token", "")))
        if info is None or info["exp"] <= time.monotonic():
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "client_id": info["client"], "sub": info["sub"]})

    async def revoke(request: Request) -> Response:
        tokens.clear()
        return JSONResponse({"ok": True})

    async def wait_expired(request: Request) -> Response:
        scope = request.query_params.get("scope")
        if scope is not None:
            found = [t for t in tokens.values() if t["scope"] == scope]
        else:
            found = [t for t in (tokens.get(request.query_params.get("token", "")),) if t is not None]
        if found:
            await asyncio.sleep(max(0.0, max(t["exp"] for t in found) - time.monotonic()) + 0.01)
        return JSONResponse({"expired": True})

    async def get_log(request: Request) -> Response:
        return JSONResponse(log)

    app = Starlette(routes=[
        Route("/token", token, methods=["POST"]),
        Route("/introspect", introspect, methods=["POST"]),
        Route("/_test/revoke", revoke, methods=["POST"]),
        Route("/_test/wait-expired", wait_expired),
        Route("/_test/log", get_log),
    ])  # fmt: skip
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is told: a client may connect at once
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
