"""A scriptable A2A agent built with the official a2a-sdk (1.3), run as its own process.

    python a2a_agent.py [--mode 1.0|0.3|both] [--no-streaming] [--public-url URL] ...

It binds 127.0.0.1 on a port the OS picks, prints `PORT <n>` on stdout, and serves:
the agent card at /.well-known/agent-card.json, JSON-RPC at /, HTTP+JSON under /rest
(0.3 under /rest/v1), with the 0.3 compatibility adapters when the mode includes 0.3.
`GET /_test/log` returns every request it received (method, path, a few headers, the
W3C `traceparent` and `tracestate` among them, JSON body) so tests can check what
reached the agent.

The first word of the user's message picks a behaviour (the rest is the argument):

  hello ...      a status message, then one artifact chunk "You said: ...", completed
  message: ...   a bare Message reply (no task)
  chunks:N[@MS]  N artifact chunks "c0 " "c1 " ... MS ms apart (default 10), completed
  slow:N         like chunks, 100 ms apart (for cancel and stream-cut tests)
  nocancel:N     like slow, but cancelling is refused (TaskNotCancelable)
  bench:N        N one-character chunks, as fast as the SDK goes
  ask:           input-required, offering options yes/no; then "You chose: <id>"
  askfree:       input-required, plain text question; then "Hello, <answer>!"
  fail:          failed, status message "boom: the agent failed on purpose"
  reject:        rejected, status message "I will not do that."
  auth:          auth-required, "Sign in at https://auth.example.com/login"
  files:         one artifact of four parts: text, raw image, url, data
  data:          one artifact of one data part {"key": "value", "count": 42}

Failure injection for the bridge's error tests: --token (required bearer token, or
the header named by --api-key-header), --fail-status N (every A2A call answers N),
--garbage (every A2A call answers invalid JSON), --card-status N, --card-garbage,
--card-version V (interfaces claim protocol version V), --tls-cert-out PATH (serve
HTTPS with a fresh self-signed certificate for 127.0.0.1, written to PATH),
--introspect URL (every A2A call needs `Authorization: Bearer T` with a token the
OAuth server at URL says is active, RFC 7662; 401 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import ipaddress
import json
import os
import socket
import sys
import tempfile
from typing import Any

import uvicorn
from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _parse(text: str) -> tuple[str, str, str]:
    """(word, number-ish argument, rest)."""
    head, _, rest = text.strip().partition(" ")
    word, sep, arg = head.partition(":")
    if not sep:
        return "hello", "", text.strip()
    return word, arg, rest


class Scripted(AgentExecutor):
    def __init__(self) -> None:
        self.asking: dict[str, str] = {}  # task id → the script waiting for an answer
        self.refuse_cancel: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        assert msg is not None
        task_id, context_id = context.task_id, context.context_id
        assert task_id and context_id
        up = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        waiting = self.asking.pop(task_id, None)
        if waiting is not None:
            await up.start_work()
            await self._answered(up, waiting, msg, text)
            return
        word, arg, rest = _parse(text)
        if word == "message":
            await event_queue.enqueue_event(new_text_message(f"Direct reply: {rest}", context_id=context_id))
            return
        if context.current_task is None:
            await event_queue.enqueue_event(
                pb.Task(id=task_id, context_id=context_id, status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED), history=[msg])
            )
        await up.start_work(up.new_agent_message([pb.Part(text=f"Working on {word}. ")]))
        if word in ("chunks", "slow", "nocancel", "bench"):
            n_s, _, ms = arg.partition("@")
            n = int(n_s or 5)
            delay = (int(ms) if ms else {"chunks": 10, "bench": 0}.get(word, 100)) / 1000
            if word == "nocancel":
                self.refuse_cancel.add(task_id)
            aid = "stream"
            for i in range(n):
                piece = "x" if word == "bench" else f"c{i} "
                await up.add_artifact([pb.Part(text=piece)], artifact_id=aid, name="answer", append=i > 0, last_chunk=i == n - 1)
                if delay:
                    await asyncio.sleep(delay)
            await up.complete(up.new_agent_message([pb.Part(text="Done.")]))
        elif word == "ask":
            self.asking[task_id] = "ask"
            options = {"options": [{"id": "yes", "label": "Yes, proceed"}, {"id": "no", "label": "No, stop"}]}
            await up.requires_input(
                up.new_agent_message([pb.Part(text="Proceed with the plan?"), pb.Part(data=ParseDict(options, struct_pb2.Value()))])
            )
        elif word == "askfree":
            self.asking[task_id] = "askfree"
            await up.requires_input(up.new_agent_message([pb.Part(text="What is your name?")]))
        elif word == "fail":
            await up.failed(up.new_agent_message([pb.Part(text="boom: the agent failed on purpose")]))
        elif word == "reject":
            await up.reject(up.new_agent_message([pb.Part(text="I will not do that.")]))
        elif word == "auth":
            self.asking[task_id] = "auth"
            await up.requires_auth(up.new_agent_message([pb.Part(text="Sign in at https://auth.example.com/login")]))
        elif word == "files":
            data = ParseDict({"rows": 2, "ok": True}, struct_pb2.Value())
            parts = [
                pb.Part(text="Here are the files."),
                pb.Part(raw=PNG_1PX, media_type="image/png", filename="dot.png"),
                pb.Part(url="https://example.com/report.pdf", media_type="application/pdf", filename="report.pdf"),
                pb.Part(data=data),
            ]
            await up.add_artifact(parts, artifact_id="files", name="files", last_chunk=True)
            await up.complete()
        elif word == "data":
            value = ParseDict({"key": "value", "count": 42}, struct_pb2.Value())
            await up.add_artifact([pb.Part(data=value)], artifact_id="data", name="data", last_chunk=True)
            await up.complete()
        else:
            await up.add_artifact([pb.Part(text=f"You said: {rest}")], artifact_id="answer", name="answer", last_chunk=True)
            await up.complete()

    async def _answered(self, up: TaskUpdater, script: str, msg: pb.Message, text: str) -> None:
        if script == "ask":
            chosen = text
            for p in msg.parts:
                if p.HasField("data"):
                    d = json.loads(json.dumps(_value(p.data)))
                    if isinstance(d, dict) and d.get("selected"):
                        chosen = str(d["selected"][0])
            reply = f"You chose: {chosen}"
        elif script == "auth":
            reply = f"Signed in; continuing with: {text}"
        else:
            reply = f"Hello, {text}!"
        await up.add_artifact([pb.Part(text=reply)], artifact_id="answer", name="answer", last_chunk=True)
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.task_id in self.refuse_cancel:
            raise UnsupportedOperationError(message="this task cannot be cancelled")
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _value(v: struct_pb2.Value) -> Any:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(v)


def build_card(args: argparse.Namespace, base: str) -> pb.AgentCard:
    versions = {"1.0": ["1.0"], "0.3": ["0.3"], "both": ["1.0", "0.3"]}[args.mode]
    if args.card_version:
        versions = [args.card_version]
    interfaces = []
    for v in versions:
        interfaces.append(pb.AgentInterface(url=f"{base}/", protocol_binding="JSONRPC", protocol_version=v))
        interfaces.append(pb.AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version=v))
    if args.rest_first:
        interfaces.sort(key=lambda i: i.protocol_binding != "HTTP+JSON")
    card = pb.AgentCard(
        name="Research Agent",
        description="Finds and summarises documents (a2a-sdk test peer).",
        version="2.5.0",
        supported_interfaces=interfaces,
        capabilities=pb.AgentCapabilities(streaming=not args.no_streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(id="summarize", name="Summarize", description="Summarises a document", tags=["docs"], examples=["summarize README.md"]),
            pb.AgentSkill(id="web search", name="Web search", description="Searches the web", tags=["web"]),
        ],
    )
    if args.token:
        if args.api_key_header:
            card.security_schemes["key"].api_key_security_scheme.CopyFrom(
                pb.APIKeySecurityScheme(location="header", name=args.api_key_header)
            )
            card.security_requirements.append(pb.SecurityRequirement(schemes={"key": pb.StringList()}))
        else:
            card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(pb.HTTPAuthSecurityScheme(scheme="Bearer"))
            card.security_requirements.append(pb.SecurityRequirement(schemes={"bearer": pb.StringList()}))
    return card


class Gate:
    """Pure ASGI middleware: records requests, checks the token, injects failures."""

    def __init__(self, app: Any, args: argparse.Namespace) -> None:
        self.app = app
        self.args = args
        self.log: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/_test/log":
            await JSONResponse(self.log)(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = b""
        more = True
        while more:
            m = await receive()
            body += m.get("body", b"")
            more = m.get("more_body", False)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode(errors="replace")
        keep = ("a2a-version", "authorization", "content-type", "accept", "if-none-match", "x-team", "x-api-key", "x-forwarded-user",
                "traceparent", "tracestate")
        self.log.append(
            {"method": scope["method"], "path": path, "query": scope["query_string"].decode(), "headers": {k: v for k, v in headers.items() if k in keep}, "body": parsed}
        )
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        a = self.args
        if path.startswith("/.well-known/"):
            if a.card_status:
                await Response("no card here", status_code=a.card_status)(scope, replay, send)
                return
            if a.card_garbage:
                await Response("<html>not a card</html>", media_type="application/json")(scope, replay, send)
                return
            await self.app(scope, replay, send)
            return
        if a.introspect:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            active = False
            if scheme.lower() == "bearer" and given:
                import httpx

                async with httpx.AsyncClient(trust_env=False) as h:
                    active = (await h.post(a.introspect, data={"token": given})).json().get("active", False)
            if not active:
                await JSONResponse({"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})(scope, replay, send)
                return
        if a.token:
            got = headers.get(a.api_key_header.lower()) if a.api_key_header else headers.get("authorization")
            want = a.token if a.api_key_header else f"Bearer {a.token}"
            if got is None:
                await JSONResponse({"error": "unauthenticated"}, status_code=401)(scope, replay, send)
                return
            if got != want:
                await JSONResponse({"error": "forbidden"}, status_code=403)(scope, replay, send)
                return
        if a.fail_status:
            extra = {"Retry-After": "7"} if a.fail_status == 429 else {}
            await JSONResponse({"error": "injected"}, status_code=a.fail_status, headers=extra)(scope, replay, send)
            return
        if a.garbage:
            await Response("this is { not json", media_type="application/json")(scope, replay, send)
            return
        await self.app(scope, replay, send)


def _self_signed(cert_out: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    with open(cert_out, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    key_path = os.path.join(tempfile.mkdtemp(), "key.pem")
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_out, key_path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["1.0", "0.3", "both"], default="both")
    ap.add_argument("--no-streaming", action="store_true")
    ap.add_argument("--rest-first", action="store_true", help="list the HTTP+JSON interfaces first")
    ap.add_argument("--public-url", default=None, help="the base URL the card advertises (a proxy in front)")
    ap.add_argument("--cache-control", default=None)
    ap.add_argument("--token", default=None)
    ap.add_argument("--api-key-header", default=None)
    ap.add_argument("--introspect", default=None, help="an RFC 7662 endpoint that checks bearer tokens")
    ap.add_argument("--fail-status", type=int, default=0)
    ap.add_argument("--garbage", action="store_true")
    ap.add_argument("--card-status", type=int, default=0)
    ap.add_argument("--card-garbage", action="store_true")
    ap.add_argument("--card-version", default=None)
    ap.add_argument("--tls-cert-out", default=None)
    ap.add_argument("--matrix", action="store_true", help="speak the pair matrix's words (a2a_matrix.py)")
    args = ap.parse_args()

    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and accepted sockets inherit it. Without it, Nagle + delayed ACK stall every
    # response on a reused connection by ~40 ms (uvicorn's own binding gets this right).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    scheme = "https" if args.tls_cert_out else "http"
    base = (args.public_url or f"{scheme}://127.0.0.1:{port}").rstrip("/")
    card = build_card(args, base)
    if args.matrix:
        from a2a_matrix import MatrixAgent

        executor: AgentExecutor = MatrixAgent()
    else:
        executor = Scripted()
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    compat = args.mode in ("0.3", "both") or args.card_version is not None
    routes: list[Any] = [
        *create_agent_card_routes(card, cache_control=args.cache_control),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=compat),
        *create_rest_routes(handler, enable_v0_3_compat=compat, path_prefix="/rest"),
    ]
    app = Gate(Starlette(routes=[r for r in routes if isinstance(r, Route)] + [r for r in routes if not isinstance(r, Route)]), args)
    ssl_kw: dict[str, Any] = {}
    if args.tls_cert_out:
        cert, key = _self_signed(args.tls_cert_out)
        ssl_kw = {"ssl_certfile": cert, "ssl_keyfile": key}
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, **ssl_kw)
    server = uvicorn.Server(config)
    print(f"PORT {port}", flush=True)
    sys.stdout.flush()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
