"""A Blade-style chat server on the official `python-socketio` (ASGI, under uvicorn), run as its own process.

    python socketio_server.py [--token T] [--introspect URL] [--ping-interval-ms N] [--ping-timeout-ms N]

(--introspect: tokens are OAuth access tokens the RFC 7662 endpoint at URL says are active.)

It binds 127.0.0.1 on a port the OS picks and prints `PORT <n>`. It speaks the
chat event stream the way Blade documents it (Blade `api/websocket.md`, `api/chat-flow.md`): Socket.IO at
`/socket.io/` (WebSocket only) with the token in CONNECT's `auth`, REST under `/api`
with `Authorization: Bearer`:

- `POST /api/sessions {intent, ...}` → `{session_id}`; `GET /api/sessions/{id}/messages`;
- `session:subscribe {session_id, after_sequence?}` (acknowledged with
  `{session_id, sequence}`, after replaying every frame past `after_sequence`; or
  `{error}` when that part of the stream is gone); `chat:send`, `chat:stop` (acked).

Every frame of a session carries a gapless `sequence`. Runs belong to the session,
not the socket: a client that drops and re-subscribes finds its run still going.
`GET /_test/log` returns what reached the server (REST calls, connects, events).

The first word of a `chat:send` message picks the run:

  hello ...   thinking, then "You said: ...", usage, chat:end completed
  tools       Bash, Read, Edit, Write, Glob, Grep, WebSearch, WebFetch, Custom tool calls
              (set_tool_status, results; Bash fails)
  fork        an Agent tool call whose child turn (parent_fork_tool_call_id) streams and reads
  ask         AskUserQuestion (one question, three options): the turn pauses, chat:end
              says completed; the askuser_answer resumes it: "You chose: <label>" / "You wrote: <text>"
  askmany     AskUserQuestion with two questions (a form)
  approve     AskUserQuestion asking permission with labels only ("Allow" / "Deny" / "Ask me later"):
              "You chose: <label>"
  slow N      N chunks "tick i. " 50 ms apart; chat:stop ends it interrupted
  drop N      N chunks "d1 " "d2 " ... 60 ms apart; after "d3 " every socket of the
              session is cut (no close frame); the run goes on
  forget N    like drop, but the server forgets the stream it cut (resuming it fails)
  fail        system:error (provider_error), chat:end failed
  maxturns    chat:end with finish_reason max_turns
  badpatch    a turn:patch whose data is not an object
  headless    JSON text; chat:end result {output: {...}} (reports headless/output_schema)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import uuid
from typing import Any

import socketio
import uvicorn

ASK = {
    "questions": [
        {
            "question": "Which database should I use?",
            "header": "Database",
            "options": [
                {"label": "PostgreSQL", "description": "relational"},
                {"label": "SQLite"},
                {"label": "Redis", "description": "in memory"},
            ],
            "multiSelect": False,
        }
    ],
    "source_loop": None,
}
ASK_MANY = {
    "questions": [
        {"question": "Which language?", "header": "Language", "options": [{"label": "Python"}, {"label": "Go"}]},
        {"question": "Anything else?", "header": "Notes", "options": []},
    ]
}
APPROVE = {
    "questions": [
        {
            "question": "Run rm -rf build?",
            "header": "Permission",
            "options": [{"label": "Allow"}, {"label": "Deny", "description": "leave it"}, {"label": "Ask me later"}],
            "multiSelect": False,
        }
    ]
}
TOOLS = [
    ("Bash", "Run ls", {"command": "ls"}, "error", "ls: permission denied"),
    ("Read", "Read README.md", {"path": "README.md"}, "done", "# hello"),
    ("Edit", "Edit a.py", {"path": "a.py"}, "done", "edited"),
    ("Write", "Write b.py", {"path": "b.py"}, "done", "written"),
    ("Glob", "Glob *.py", {"pattern": "*.py"}, "done", ["a.py", "b.py"]),
    ("Grep", "Grep TODO", {"pattern": "TODO"}, "done", "a.py:1: TODO"),
    ("WebSearch", "Search trio", {"query": "trio"}, "done", "results"),
    ("WebFetch", "Fetch example.com", {"url": "https://example.com"}, "done", "<html>"),
    ("mcp__notes__save", "Save a note", {"text": "x"}, "done", "saved"),
]


class ChatSession:
    def __init__(self, session_id: str, intent: str) -> None:
        self.id = session_id
        self.intent = intent
        self.log: list[tuple[int, str, dict[str, Any]]] = []
        self.seq = 0
        self.forgotten = 0  # frames up to this sequence can no longer be replayed
        self.lock = asyncio.Lock()
        self.run: asyncio.Task[None] | None = None
        self.stop = asyncio.Event()
        self.answer: asyncio.Future[dict[str, Any]] | None = None
        self.sockets: set[str] = set()
        self.turns = 0


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sio = socketio.AsyncServer(
            async_mode="asgi",
            transports=["websocket"],
            ping_interval=args.ping_interval_ms / 1000,
            ping_timeout=args.ping_timeout_ms / 1000,
            cors_allowed_origins="*",
        )
        self.sessions: dict[str, ChatSession] = {}
        self.log: list[dict[str, Any]] = []
        self.transports: dict[str, Any] = {}  # eio sid → its asyncio transport (to cut)
        sio = self.sio
        sio.on("connect", self.connect)
        sio.on("disconnect", self.disconnect)
        sio.on("session:subscribe", self.subscribe)
        sio.on("chat:send", self.send)
        sio.on("chat:stop", self.stop)

    # -- REST (a few lines of raw ASGI) ---------------------------------------------------
    async def rest(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        authorized = None
        if self.args.introspect:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            authorized = scheme.lower() == "bearer" and await self._active(given)
        status, answer = self.route(scope["method"], scope["path"], headers, body, authorized)
        data = json.dumps(answer).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": data})

    async def _active(self, token: str | None) -> bool:
        import httpx

        if not token:
            return False
        async with httpx.AsyncClient(trust_env=False) as h:
            return bool((await h.post(self.args.introspect, data={"token": token})).json().get("active"))

    def route(self, method: str, path: str, headers: dict[str, str], body: bytes, authorized: bool | None = None) -> tuple[int, Any]:
        if path == "/_test/log":
            return 200, self.log
        if authorized is None:
            authorized = self.args.token is None or headers.get("authorization") == f"Bearer {self.args.token}"
        if method == "POST" and path == "/api/sessions":
            req = json.loads(body or b"{}")
            self.log.append({"kind": "rest", "method": "POST", "path": path, "body": req, "auth": "authorization" in headers})
            if not authorized:
                return 401, {"detail": "invalid or missing API key"}
            sid = uuid.uuid4().hex
            self.sessions[sid] = ChatSession(sid, str(req.get("intent", "")))
            return 200, {"session_id": sid}
        parts = path.strip("/").split("/")
        if method == "GET" and len(parts) == 4 and parts[:2] == ["api", "sessions"] and parts[3] == "messages":
            self.log.append({"kind": "rest", "method": "GET", "path": path})
            if not authorized:
                return 401, {"detail": "invalid or missing API key"}
            session = self.sessions.get(parts[2])
            if session is None:
                return 404, {"detail": "session not found"}
            return 200, [d for _, e, d in session.log if e == "turn:end"]
        return 404, {"detail": "not found"}

    # -- Socket.IO ------------------------------------------------------------------------
    async def connect(self, sid: str, environ: dict[str, Any], auth: Any) -> None:
        token = auth.get("token") if isinstance(auth, dict) else None
        self.log.append({"kind": "connect", "sid": sid, "auth_keys": sorted(auth) if isinstance(auth, dict) else None,
                         "token_ok": token == self.args.token})  # fmt: skip
        if self.args.token is not None and token != self.args.token:
            raise socketio.exceptions.ConnectionRefusedError("invalid token")
        if self.args.introspect and not await self._active(token):
            self.log.append({"kind": "refused", "sid": sid})
            raise socketio.exceptions.ConnectionRefusedError("invalid token")
        send = environ.get("asgi.send")
        self.transports[sid] = getattr(getattr(send, "__self__", None), "transport", None)  # uvicorn's protocol

    async def disconnect(self, sid: str, *args: Any) -> None:
        self.log.append({"kind": "disconnect", "sid": sid})
        for s in self.sessions.values():
            s.sockets.discard(sid)

    async def subscribe(self, sid: str, data: dict[str, Any]) -> dict[str, Any]:
        self.log.append({"kind": "event", "sid": sid, "event": "session:subscribe", "data": data})
        session = self.sessions.get(str(data.get("session_id")))
        if session is None:
            return {"error": f"unknown session {data.get('session_id')!r}"}
        after = data.get("after_sequence")
        async with session.lock:
            if isinstance(after, int) and after < session.forgotten:
                return {"error": f"cannot resume after sequence {after}: the stream up to {session.forgotten} is gone"}
            if isinstance(after, int):
                for seq, event, payload in session.log:
                    if seq > after:
                        await self.sio.emit(event, payload, to=sid)
            await self.sio.enter_room(sid, session.id)
            session.sockets.add(sid)
            return {"session_id": session.id, "sequence": session.seq}

    async def send(self, sid: str, data: dict[str, Any]) -> dict[str, Any]:
        self.log.append({"kind": "event", "sid": sid, "event": "chat:send", "data": data})
        session = self.sessions.get(str(data.get("session_id")))
        if session is None:
            await self.sio.emit("system:error", {"message": "unknown session", "code": "not_found"}, to=sid)
            return {"status": "error"}
        answer = data.get("askuser_answer")
        if answer is not None:
            if session.answer is None or session.answer.done():
                await self.sio.emit("system:error", {"message": "no question is waiting", "code": "bad_request",
                                                     "session_id": session.id}, to=sid)  # fmt: skip
                return {"status": "error"}
            session.answer.set_result(answer)
            return {"status": "ok"}
        if session.run is not None and not session.run.done():
            await self.sio.emit("system:error", {"message": "a chat is already running", "code": "busy",
                                                 "session_id": session.id}, to=sid)  # fmt: skip
            return {"status": "error"}
        session.stop = asyncio.Event()
        session.run = asyncio.ensure_future(Run(self, session, data).main())
        return {"status": "ok"}

    async def stop(self, sid: str, data: dict[str, Any]) -> dict[str, Any]:
        self.log.append({"kind": "event", "sid": sid, "event": "chat:stop", "data": data})
        session = self.sessions.get(str(data.get("session_id")))
        if session is not None:
            session.stop.set()
            if session.answer is not None and not session.answer.done():
                # Paused on a question: the loop already returned; the stop abandons it.
                session.answer.cancel()
                session.answer = None
                await self.emit(session, "chat:end", {"status": "interrupted", "result": None, "finish_reason": "completed"})
        return {"status": "ok"}

    async def emit(self, session: ChatSession, event: str, data: dict[str, Any]) -> None:
        async with session.lock:
            session.seq += 1
            data = {**data, "session_id": session.id, "sequence": session.seq}
            session.log.append((session.seq, event, data))
            await self.sio.emit(event, data, room=session.id)

    def cut(self, session: ChatSession, *, forget: bool) -> None:
        """Cut every socket of the session at the TCP level: no close frame, no goodbye."""
        for sid in list(session.sockets):
            transport = self.transports.pop(sid, None)
            self.log.append({"kind": "cut", "sid": sid, "ok": transport is not None})
            if transport is not None:
                transport.abort()
        session.sockets.clear()
        if forget:
            session.forgotten = session.seq


class _Abandoned(Exception):
    """A paused run that chat:stop abandoned."""


class Run:
    """One chat:send: the frames of its agent loop (§4.3)."""

    def __init__(self, server: Server, session: ChatSession, data: dict[str, Any]) -> None:
        self.server = server
        self.session = session
        self.data = data
        message = data.get("message", "")
        if isinstance(message, list):
            message = " ".join(str(i.get("text", "")) for i in message if isinstance(i, dict))
        self.text = str(message)
        session.turns += 1
        self.n = session.turns
        self.turn_id = f"t{self.n}"

    async def emit(self, event: str, data: dict[str, Any]) -> None:
        await self.server.emit(self.session, event, data)

    def proj(self, turn_id: str, *, role: str = "assistant", status: str = "streaming", parent: str | None = None,
             loop: str = "root", **more: Any) -> dict[str, Any]:  # fmt: skip
        return {"id": turn_id, "turn_id": turn_id, "loop_id": loop, "kind": "message", "role": role, "status": status,
                "blocks": [], "tool_calls": [], "parent_fork_tool_call_id": parent, **more}  # fmt: skip

    async def patch(self, turn_id: str, patch_type: str, data: Any, loop: str = "root") -> None:
        await self.emit("turn:patch", {"turn_id": turn_id, "loop_id": loop, "patch_type": patch_type, "data": data})

    async def say(self, turn_id: str, text: str, kind: str = "text", loop: str = "root") -> None:
        content = ""
        for word in text.split(" "):
            delta = word + " "
            content += delta
            await self.patch(turn_id, "add_content", {"type": kind, "content": content, "text_delta": delta}, loop)

    async def start(self) -> str:
        await self.emit("chat:start", {})
        user = self.proj(f"{self.turn_id}-user", role="user", status="completed", blocks=[{"type": "text", "content": self.text}])
        await self.emit("turn:start", user)
        await self.emit("turn:end", user)
        tid = f"{self.turn_id}-a"
        await self.emit("turn:start", self.proj(tid))
        return tid

    async def end(self, tid: str, status: str = "completed", finish: str = "completed", result: Any = None) -> None:
        usage = {"input_tokens": 12, "output_tokens": 34}
        await self.emit("turn:end", self.proj(tid, status=status, usage=usage, context_window=200000, duration_ms=5))
        await self.emit("chat:end", {"status": status if status != "paused" else "completed", "result": result,
                                     "finish_reason": finish})  # fmt: skip

    async def main(self) -> None:
        word, _, rest = self.text.strip().partition(" ")
        handler = getattr(self, f"run_{word}", None)
        try:
            if self.server.args.matrix:
                from socketio_matrix import play  # the pair matrix's words

                await play(self)
                return
            await (handler(rest) if handler is not None else self.run_hello(self.text))
        except _Abandoned:
            pass
        except Exception as exc:  # noqa: BLE001 - a test server: say it loudly
            print(f"run failed: {exc!r}", file=sys.stderr, flush=True)
            raise

    async def run_hello(self, rest: str) -> None:
        tid = await self.start()
        await self.say(tid, "Let me think.", "thinking")
        await self.say(tid, f"You said: {rest}")
        await self.end(tid)

    async def run_tools(self, rest: str) -> None:
        tid = await self.start()
        for i, (name, title, args, status, result) in enumerate(TOOLS):
            tc = f"tc_{i}_{name}"
            await self.patch(tid, "add_tool_call", {"id": tc, "tool_name": name, "display_name": title,
                                                    "arguments": json.dumps(args), "status": "pending"})  # fmt: skip
            await self.patch(tid, "set_tool_status", {"tool_call_id": tc, "status": "pending"})
            await self.patch(tid, "tool_result", {"tool_call_id": tc, "result": result, "status": status, "duration_ms": 3})
        await self.say(tid, "Tools done.")
        await self.end(tid)

    async def run_fork(self, rest: str) -> None:
        tid = await self.start()
        fork = "tc_fork_001"
        await self.patch(tid, "add_tool_call", {"id": fork, "tool_name": "Agent", "display_name": "Research sub-agent",
                                                "arguments": json.dumps({"prompt": "look"}), "status": "pending"})  # fmt: skip
        child = f"{self.turn_id}-child"
        loop = "fork-research"
        await self.emit("turn:start", self.proj(child, parent=fork, loop=loop))
        await self.say(child, "Child looking.", loop=loop)
        await self.patch(child, "add_tool_call", {"id": "tc_child_read", "tool_name": "Read", "display_name": "Read notes.md",
                                                  "arguments": "{\"path\": \"notes.md\"}", "status": "pending"}, loop)  # fmt: skip
        await self.patch(child, "tool_result", {"tool_call_id": "tc_child_read", "result": "notes", "status": "done"}, loop)
        await self.emit("turn:end", self.proj(child, status="completed", parent=fork, loop=loop,
                                              usage={"input_tokens": 5, "output_tokens": 6}))  # fmt: skip
        await self.patch(tid, "tool_result", {"tool_call_id": fork, "result": "the child found notes", "status": "done"})
        await self.say(tid, "Fork done.")
        await self.end(tid)

    async def _ask(self, arguments: dict[str, Any]) -> dict[str, Any]:
        tid = await self.start()
        ask_id = f"tc_ask_{self.n}"
        session = self.session
        loop = asyncio.get_running_loop()
        session.answer = loop.create_future()
        await self.patch(tid, "add_tool_call", {"id": ask_id, "tool_name": "AskUserQuestion", "display_name": "Question",
                                                "arguments": json.dumps(arguments), "status": "awaiting_answer"})  # fmt: skip
        await self.patch(tid, "set_status", {"status": "paused"})
        await self.end(tid, status="paused")  # chat:end says completed: the loop returned (§4.5)
        try:
            answer = await session.answer
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            raise _Abandoned from None
        session.answer = None
        # The resumed loop: a new run on the same session.
        await self.emit("chat:start", {})
        tid2 = f"{self.turn_id}-resumed"
        await self.emit("turn:start", self.proj(tid2))
        await self.patch(tid2, "tool_result", {"tool_call_id": ask_id, "result": answer, "status": "done"})
        self.tid2 = tid2
        return answer

    async def run_ask(self, rest: str) -> None:
        answer = await self._ask(ASK)
        sel = (answer.get("selections") or {}).get("0") or []
        custom = (answer.get("custom") or {}).get("0")
        labels = [ASK["questions"][0]["options"][i]["label"] for i in sel]  # type: ignore[index]
        await self.say(self.tid2, f"You chose: {', '.join(labels)}" if labels else f"You wrote: {custom}")
        await self.end(self.tid2)

    async def run_approve(self, rest: str) -> None:
        answer = await self._ask(APPROVE)
        sel = (answer.get("selections") or {}).get("0") or []
        labels = [APPROVE["questions"][0]["options"][i]["label"] for i in sel]
        await self.say(self.tid2, f"You chose: {', '.join(labels) or 'nothing'}")
        await self.end(self.tid2)

    async def run_askmany(self, rest: str) -> None:
        answer = await self._ask(ASK_MANY)
        await self.say(self.tid2, "Answers: " + json.dumps(answer, sort_keys=True))
        await self.end(self.tid2)

    async def _stream(self, words: list[str], delay: float, *, cut_after: int = 0, forget: bool = False) -> None:
        tid = await self.start()
        content = ""
        for i, word in enumerate(words):
            if self.session.stop.is_set():
                await self.patch(tid, "set_status", {"status": "interrupted"})
                await self.end(tid, status="interrupted", finish="completed")
                return
            content += word
            await self.patch(tid, "add_content", {"type": "text", "content": content, "text_delta": word})
            if cut_after and i + 1 == cut_after:
                self.server.cut(self.session, forget=forget)
            try:
                await asyncio.wait_for(self.session.stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
        await self.end(tid)

    async def run_slow(self, rest: str) -> None:
        await self._stream([f"tick {i}. " for i in range(1, int(rest or 40) + 1)], 0.05)

    async def run_drop(self, rest: str) -> None:
        await self._stream([f"d{i} " for i in range(1, int(rest or 12) + 1)], 0.06, cut_after=3)

    async def run_forget(self, rest: str) -> None:
        await self._stream([f"d{i} " for i in range(1, int(rest or 12) + 1)], 0.06, cut_after=3, forget=True)

    async def run_fail(self, rest: str) -> None:
        tid = await self.start()
        await self.say(tid, "Trying.")
        await self.emit("system:error", {"message": "the model provider is unavailable", "code": "provider_error",
                                         "detail": None})  # fmt: skip
        await self.emit("turn:end", self.proj(tid, status="failed"))
        await self.emit("chat:end", {"status": "failed", "result": {"err_msg": "provider"}, "finish_reason": "tool_error"})

    async def run_maxturns(self, rest: str) -> None:
        tid = await self.start()
        await self.say(tid, "Out of turns.")
        await self.end(tid, finish="max_turns")

    async def run_badpatch(self, rest: str) -> None:
        tid = await self.start()
        await self.emit("turn:patch", {"turn_id": tid, "loop_id": "root", "patch_type": "add_content", "data": "not an object"})
        await self.end(tid)

    async def run_headless(self, rest: str) -> None:
        tid = await self.start()
        output = {"city": "Paris", "headless": bool(self.data.get("headless")), "schema": self.data.get("output_schema")}
        await self.say(tid, json.dumps(output))
        await self.end(tid, result={"output": output})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--token", default=None)
    ap.add_argument("--introspect", default=None)
    ap.add_argument("--ping-interval-ms", type=int, default=25000)
    ap.add_argument("--ping-timeout-ms", type=int, default=20000)
    ap.add_argument("--matrix", action="store_true", help="speak the pair matrix's words (socketio_matrix.py)")
    args = ap.parse_args()
    server = Server(args)
    app = socketio.ASGIApp(server.sio, other_asgi_app=server.rest, socketio_path="socket.io")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen(128)  # before saying the port: a client may connect before uvicorn is up
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="wsproto", timeout_graceful_shutdown=1)
    print(f"PORT {port}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
