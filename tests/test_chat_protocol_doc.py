"""docs/chat-protocol.md cannot drift: every example in it is run, decoded or validated.

- Every frame the page shows (```json and ```jsonl blocks of `{"event", "data"}` objects)
  fits the AsyncAPI document's payload for its event (bridge/fronts/asyncapi.py, strictly:
  a misspelt field fails), and every client frame decodes with the daemon's own decoders
  (bridge/schema/chat.py `ClientFrame`, `CLIENT_EVENTS`).
- Each transcript marked `<!-- replay -->` is replayed on a real `agent-bridge serve` with
  the demo route: its client frames are sent, and the frames the daemon answers between
  them must equal the page's (ids, times and durations normalized, tests/doc_support.py).
  `<!-- replay: errors -->` pairs a frame with its answer, each on a fresh connection.
- Every `curl` of the page is run, in order, on another fresh daemon; its answer must equal
  the JSON or server-sent events shown after it (a list may be shown shortened), and it
  must fit the response schema of /api/openapi.json for its path, method and status
  (strictly). `<!-- sse: changes -->` blocks fit the change feed's schemas.
- Every operation of /api/openapi.json that takes a body under `/api/` refuses an unknown
  field with a 400 whose detail names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest
import trio
from daemon_support import base_config, demo_route, start_daemon
from doc_support import ROOT, Block, OpenApiCheck, blocks, covers, curl, new_ids, normalized, strict
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7
from trio_websocket import open_websocket_url

from bridge.codecs.sse import SSEDecoder
from bridge.fronts.asyncapi import build_asyncapi
from bridge.fronts.openapi import build_openapi
from bridge.schema import chat

DOC = ROOT / "docs" / "chat-protocol.md"
PAGE_SESSION = "cadd99e526ab47638e60a01782e08303"  # the session id of the page's single frames
_ASYNC = "urn:asyncapi"
_async_doc = strict(build_asyncapi())
_async_reg = Registry().with_resource(_ASYNC, Resource(_async_doc, DRAFT7))
_openapi = OpenApiCheck(build_openapi())
_MESSAGE_KEY = {m["name"]: key for key, m in _async_doc["components"]["messages"].items()}


def doc_blocks() -> list[Block]:
    return blocks(DOC.read_text())


def frames_of(block: Block) -> list[dict[str, Any]]:
    if block.lang == "jsonl":
        return [json.loads(line) for line in block.lines if line.strip()]
    value = json.loads(block.text)
    return [value] if isinstance(value, dict) and ("event" in value or "auth" in value) else []


def check_frame(frame: dict[str, Any], where: str) -> None:
    """`frame` fits its event's payload in the AsyncAPI document; a client frame decodes."""
    name = frame.get("event", "")
    if name in chat.CLIENT_EVENTS or "auth" in frame:
        envelope = msgspec.json.decode(json.dumps(frame), type=chat.ClientFrame)
        if name:
            msgspec.json.decode(envelope.data, type=chat.CLIENT_EVENTS[name])  # type: ignore[arg-type]
        else:
            name = "auth"  # the token alone
    if name not in _MESSAGE_KEY:
        assert "type" in frame or not name, f"{where}: {name!r} is no frame of the AsyncAPI document"
        return  # a wrong frame the page shows on purpose (Errors)
    schema = {"$ref": f"{_ASYNC}#/components/messages/{_MESSAGE_KEY[name]}/payload"}
    errors = list(jsonschema.Draft7Validator(schema, registry=_async_reg).iter_errors(frame))
    assert not errors, f"{where}: {[e.message for e in errors]}"


def check_response(method: str, path: str, status: int, body: Any, where: str) -> None:
    """`body` fits the OpenAPI response schema of (method, path, status)."""
    _openapi.response(method, path, status, body, where)


def sse_events(text: bytes) -> list[tuple[str, Any]]:
    decoder = SSEDecoder()
    events = decoder.feed(text + b"\n\n")
    return [(e.event, json.loads(e.data)) for e in events]


def check_sse(events: list[tuple[str, Any]], where: str) -> None:
    names = {"caught_up": "CaughtUp", "session": "SessionInfo"}
    for event, data in events:
        errors = _openapi.errors("#/components/schemas/" + names.get(event, "CanonicalEvent"), data)
        assert not errors, f"{where}: {event}: {errors}"


def test_every_frame_of_the_page_fits_the_asyncapi_document_and_decodes() -> None:
    seen: set[str] = set()
    for block in doc_blocks():
        if block.lang in ("json", "jsonl"):
            shown = frames_of(block)
            # A frame followed by its error: the wrong frames are shown on purpose, the errors are checked.
            for frame in shown[1::2] if block.marker == "replay: errors" else shown:
                check_frame(frame, f"{DOC.name}:{block.line}")
                seen.add(frame.get("event") or ("auth" if "auth" in frame else ""))
        if block.marker == "sse: changes":
            check_sse(sse_events(block.text.encode()), f"{DOC.name}:{block.line}")
    every = {m["name"] for m in _async_doc["components"]["messages"].values()}
    assert every - seen == set(), "frames the page never shows"


def test_a_misspelt_field_fails_the_check() -> None:
    """The check can fail: a field the schema does not know, and a client frame that does not decode."""
    with pytest.raises(AssertionError, match="Additional properties"):
        check_frame({"event": "chat:send", "data": {"session_id": "s", "mesage": "hi"}}, "probe")
    with pytest.raises(msgspec.ValidationError):
        check_frame({"event": "chat:send", "data": {"message": "hi"}}, "probe")


# -- the page replayed on a real daemon -----------------------------------------------


async def _replay(ws_url: str, h: httpx.AsyncClient, block: Block) -> None:
    lines = frames_of(block)
    doc_session = lines[0]["data"]["session_id"]
    session = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
    doc_ids, real_ids = new_ids(), new_ids()
    async with open_websocket_url(ws_url) as ws:
        i = 0
        while i < len(lines):
            sent = json.loads(json.dumps(lines[i]).replace(doc_session, session))
            await ws.send_message(json.dumps(sent))
            normalized(lines[i], doc_ids), normalized(sent, real_ids)  # the ids in the order they appear
            i += 1
            while i < len(lines) and lines[i]["event"] not in chat.CLIENT_EVENTS:
                real = json.loads(await ws.get_message())
                if real["event"] == "session:commands":
                    continue  # state, shown apart
                where = f"{DOC.name}:{block.line} frame {i + 1}"
                assert covers(normalized(lines[i], doc_ids), normalized(real, real_ids), where) == [], real
                i += 1


async def _errors(ws_url: str, h: httpx.AsyncClient, block: Block) -> None:
    """Each frame on a fresh connection, the page's session id standing for a new session."""
    lines = [line for line in block.lines if line.strip()]
    session = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
    for sent, answer in zip(lines[::2], lines[1::2]):
        async with open_websocket_url(ws_url) as ws:
            await ws.send_message(sent.replace(PAGE_SESSION, session))
            while (real := json.loads(await ws.get_message()))["event"] == "session:commands":
                pass  # a chat:send subscribes its sender: the session's commands come first
            assert real == json.loads(answer.replace(PAGE_SESSION, session)), (sent, real)


class _Settle:
    """Follows the session's canonical events so the examples run as on a quiet daemon:
    after a prompt or an answer, until the turn ends or asks a question."""

    def __init__(self, h: httpx.AsyncClient, session: str) -> None:
        self.h, self.session, self.last = h, session, 0

    async def wait(self) -> None:
        async with self.h.stream("GET", f"/api/sessions/{self.session}/events", params={"after": self.last}) as r:
            decoder = SSEDecoder()
            async for chunk in r.aiter_raw():
                for e in decoder.feed(chunk):
                    if e.id is not None:
                        self.last = int(e.id)
                    if e.event in ("turn_ended", "question_asked"):
                        return


async def _rest(base: str, h: httpx.AsyncClient, page: list[Block]) -> None:
    env = {"BRIDGE": base}
    settle: _Settle | None = None
    for n, block in enumerate(page):
        if block.lang != "sh" or not block.text.startswith("curl ") or block.line < _rest_start(page):
            continue
        method, url, headers, body = curl(block.text, env)
        where = f"{DOC.name}:{block.line}"
        r = await h.request(method, url, headers=headers, content=body)
        path = httpx.URL(url).path
        shown = page[n + 1] if n + 1 < len(page) and page[n + 1].lang in ("json", "text") else None
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            events = sse_events(r.content)
            check_sse(events, where)
            real: Any = [[e, d] for e, d in events]
            doc: Any = [[e, d] for e, d in sse_events(shown.text.encode())] if shown else None
        else:
            real = r.json()
            check_response(method, path, r.status_code, real, where)
            doc = json.loads(shown.text) if shown else None
        assert doc is not None, f"{where}: no answer shown after the command"
        assert covers(normalized(doc), normalized(real), where) == [], real
        if "SESSION" not in env and isinstance(real, dict) and "session_id" in real:
            env["SESSION"] = real["session_id"]
            settle = _Settle(h, real["session_id"])
        if settle is not None and path.rsplit("/", 1)[-1] in ("prompt", "answer") and r.status_code < 300:
            with trio.fail_after(20):
                await settle.wait()


def _rest_start(page: list[Block]) -> int:
    """The REST section's first line: the curl of "In one minute" runs in the newcomer test."""
    text = DOC.read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if line.startswith("## REST"))


@pytest.mark.trio
async def test_the_page_replays_on_a_real_daemon(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    page = doc_blocks()
    config = base_config(tmp_path, {"demo": demo_route()}, default_route="demo")
    replays = [b for b in page if b.marker == "replay"]
    assert len(replays) >= 2 and any(b.marker == "replay: errors" for b in page)
    async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        ws_url = d.url.replace("http://", "ws://") + "/ws"
        with trio.fail_after(90):
            for block in replays:
                await _replay(ws_url, h, block)
            for block in page:
                if block.marker == "replay: errors":
                    await _errors(ws_url, h, block)
    fresh = tmp_path / "rest"  # a store of its own: the listing shows the page's sessions only
    fresh.mkdir()
    config = base_config(fresh, {"demo": demo_route()}, default_route="demo")
    async with start_daemon(bridge_exe, fresh, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        with trio.fail_after(90):
            await _rest(d.url, h, page)


@pytest.mark.trio
async def test_every_rest_body_refuses_an_unknown_field_by_name(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()}, default_route="demo")
    bodies = [
        (m.upper(), path) for path, item in build_openapi()["paths"].items() if path.startswith("/api/")
        for m, op in item.items() if m != "parameters" and "requestBody" in op
    ]  # fmt: skip
    assert len(bodies) == 4, bodies  # POST /api/sessions, prompt, answer, cancel
    async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        with trio.fail_after(60):
            session = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
            for method, path in bodies:
                url = path.replace("{session_id}", session)
                fine = {"question_id": "q1"} if path.endswith("/answer") else {}
                r = await h.request(method, url, json={**fine, "rout_e": "demo"})
                assert r.status_code == 400 and "unknown field `rout_e`" in r.json()["detail"], (path, r.text)
            # Nothing was done by the refused requests: the session never ran a turn.
            assert (await h.get(f"/api/sessions/{session}")).json()["turn_count"] == 0
