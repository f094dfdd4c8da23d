"""The API descriptions the daemon serves, checked by their own tooling, and against the code.

- `/api/openapi.json` (bridge/fronts/openapi.py) is valid OpenAPI 3.1 for
  openapi-spec-validator, and documents every HTTP path the daemon's app registers
  (other than the console's files, MCP's `/mcp` and A2A 0.3's `/v1` twins), so a new
  endpoint without a description fails here;
- `/api/asyncapi.json` (bridge/fronts/asyncapi.py) is valid AsyncAPI 3.0 for the official
  parser (@asyncapi/parser, run by node in its own process, tests/peers/asyncapi), and
  names exactly the client events the daemon decodes (bridge/schema/chat.py CLIENT_EVENTS);
- the served bytes are those documents, with an ETag answered 304, without a token when
  the REST API asks for one, and a foreign page's Origin refused as for every path.

Real answers of the daemon against the documents' schemas: tests/test_chat_protocol_doc.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from daemon_support import base_config, demo_route, start_daemon
from doc_support import OpenApiCheck
from hypothesis import given
from hypothesis import strategies as st
from npm_support import node_exe, npm_ci
from openapi_spec_validator import validate
from test_decoders_total import FUZZ, mutations, survives

from bridge.backs import make_back
from bridge.config import parse_config
from bridge.daemon import build_app
from bridge.errors import InvalidParams
from bridge.fronts.chat import events_api
from bridge.fronts.chat.rest import _create as rest_create
from bridge.fronts.asyncapi import CLIENT_FRAMES, PATCHES, build_asyncapi
from bridge.fronts.http import _compile
from bridge.fronts.openapi import build_openapi
from bridge.schema import chat
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore

ASYNCAPI_PEER = Path(__file__).resolve().parent / "peers" / "asyncapi"
# Served, but described elsewhere: the console's static files, MCP (its own protocol), A2A 0.3.
UNDOCUMENTED = ("/", "/console/{path}", "/mcp", "/a2a/{route}/")


def asyncapi_diagnostics(document: dict) -> dict:
    """The official parser's verdict on `document`: {"parsed": bool, "diagnostics": [...]}."""
    npm_ci(ASYNCAPI_PEER)
    done = subprocess.run(
        [node_exe(), "check.mjs"], cwd=ASYNCAPI_PEER, input=json.dumps(document), capture_output=True, text=True, timeout=120
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def test_openapi_document_is_valid_and_documents_every_path() -> None:
    doc = build_openapi()
    validate(doc)  # raises with the JSON path of the first problem
    config = parse_config({"default_route": "demo", "routes": {"demo": {"back": {"kind": "demo"}}}})
    app = build_app(config, SessionManager(config, MemoryStore(), make_back))
    documented = {(m.upper(), _compile(p).pattern) for p, item in doc["paths"].items() for m in item if m != "parameters"}
    served = {
        (r.method, r.pattern.pattern)
        for r in app._http  # type: ignore[attr-defined]
        if r.method not in ("OPTIONS", "HEAD") and "/v1" not in r.pattern.pattern
        and r.pattern.pattern not in {_compile(p).pattern for p in UNDOCUMENTED}
    }  # fmt: skip
    assert served - documented == set(), "served but not in /api/openapi.json"
    ops = [op for item in doc["paths"].values() for m, op in item.items() if m != "parameters"]
    assert len({op["operationId"] for op in ops}) == len(ops)


def test_asyncapi_document_is_valid_for_the_official_parser_and_matches_the_decoders() -> None:
    doc = build_asyncapi()
    verdict = asyncapi_diagnostics(doc)
    problems = [d for d in verdict["diagnostics"] if d["severity"] <= 1 and d["code"] != "asyncapi-latest-version"]
    assert verdict["parsed"] and problems == [], problems
    assert set(CLIENT_FRAMES) == set(chat.CLIENT_EVENTS)
    assert all(CLIENT_FRAMES[name][0] is typ for name, typ in chat.CLIENT_EVENTS.items())
    names = {m["name"] for m in doc["components"]["messages"].values()}
    assert names >= set(chat.CLIENT_EVENTS) | {"session:subscribed", "session:commands", "chat:start", "turn:start",
                                               "turn:patch", "turn:end", "chat:end", "system:error"}  # fmt: skip
    assert set(PATCHES) == {"add_content", "add_tool_call", "tool_result", "set_status", "set_tool_status"}


def test_the_asyncapi_parser_does_reject_a_broken_document() -> None:
    """The checker can fail: a payload schema with a wrong type and a dangling reference."""
    doc = build_asyncapi()
    doc["components"]["schemas"]["SendMessage"]["properties"]["message"]["type"] = 12
    doc["operations"]["onChatSend"]["channel"] = {"$ref": "#/channels/nowhere"}
    verdict = asyncapi_diagnostics(doc)
    assert not verdict["parsed"] and any(d["severity"] == 0 for d in verdict["diagnostics"]), verdict


@pytest.mark.trio
async def test_the_daemon_serves_both_documents_without_the_api_token(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    config = base_config(tmp_path, {"demo": demo_route()}, ws={"token_env": "DOCS_TOKEN"})
    env = {**clean_env, "DOCS_TOKEN": "d0cs-token"}
    async with start_daemon(bridge_exe, tmp_path, env, config) as d, httpx.AsyncClient(base_url=d.url, timeout=20) as h:
        with trio.fail_after(60):
            assert (await h.get("/api/sessions")).status_code == 401  # the API itself asks for the token
            r = await h.get("/api/openapi.json")
            assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
            assert r.json() == json.loads(json.dumps(build_openapi()))
            again = await h.get("/api/openapi.json", headers={"if-none-match": r.headers["etag"]})
            assert (again.status_code, again.content) == (304, b"")
            r = await h.get("/api/asyncapi.json", headers={"host": d.url.removeprefix("http://")})
            assert r.status_code == 200, r.text
            served = r.json()
            assert served["servers"]["daemon"]["host"] == d.url.removeprefix("http://")
            assert served["components"] == json.loads(json.dumps(build_asyncapi()["components"]))
            head = await h.head("/api/asyncapi.json")
            assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) == len(r.content)
            foreign = await h.get("/api/openapi.json", headers={"origin": "https://evil.example"})
            assert foreign.status_code == 403, foreign.text

            # Real answers of the A2A HTTP+JSON binding and /healthz fit the document's schemas.
            check, v1 = OpenApiCheck(build_openapi()), {"a2a-version": "1.0"}
            calls = [("GET", "/healthz", None), ("GET", "/a2a/demo/.well-known/agent-card.json", None),
                     ("POST", "/a2a/demo/message:send", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})]  # fmt: skip
            for method, path, body in calls:
                r = await h.request(method, path, json=body, headers=v1)
                assert r.status_code == 200, r.text
                check.response(method, path, 200, r.json(), "a2a")
            task = r.json()["task"]["id"]
            for path in (f"/a2a/demo/tasks/{task}", "/a2a/demo/tasks", "/a2a/demo/tasks/nope"):
                r = await h.get(path, headers=v1)
                check.response("GET", path, r.status_code, r.json(), "a2a")
            assert r.status_code == 404  # the last: a RestError


# -- the REST bodies' decoders are total -----------------------------------------------

_BODY_SEEDS = [
    b'{"route": "demo", "intent": "Try the demo"}',
    b'{"text": "hello"}',
    b'{"content": [{"type": "text", "text": "hi"}, {"type": "resource_link", "uri": "file:///a", "name": "a"}]}',
    b'{"question_id": "m2-edit-q", "selected": ["allow"], "text": "yes", "values": {"n": 1}}',
    b"{}",
    b"",
]


@FUZZ
@given(mutations(_BODY_SEEDS), st.sampled_from([rest_create, events_api._prompt, events_api._answer, events_api._cancel]))
def test_rest_bodies_decode_or_are_refused_with_invalid_params(body: bytes, decoder: Any) -> None:
    """What every body-taking endpoint decodes with (bridge/schema/chat_api.py): a value
    the store and the JSON encoder can carry, or InvalidParams (a 400), nothing else."""
    try:
        value = events_api._decode(decoder, body)
    except InvalidParams as exc:
        assert exc.message.startswith(("invalid body", "the body is not JSON")), exc.message
        return
    survives(value)
