"""The OpenAPI 3.1 document of the daemon's HTTP APIs, served at `/api/openapi.json`.

Covers the chat REST API (`/api/sessions...`, `/api/routes`), the canonical API (a
session's events over SSE, prompt/answer/cancel, the change feed), `/healthz`, and each
route's A2A 1.0 HTTP+JSON binding under `/a2a/{route}` (A2A 1.0 §11, the HTTP+JSON
binding; its 0.3 twins under `/a2a/{route}/v1` and JSON-RPC at `/a2a/{route}` are
named, not detailed). What is written by hand here is the paths, their parameters,
statuses and words; every body's schema is generated from the Struct the daemon
decodes or answers it with (bridge/fronts/api_schemas.py): bridge/schema/chat_api.py for
the REST API, bridge/schema/chat.py for history, bridge/core/events.py for the canonical
events, bridge/schema/a2a.py and a2a_card.py for A2A. The tests validate the document
with openapi-spec-validator and check the daemon's real answers against its schemas.
"""

from __future__ import annotations

from typing import Any

from bridge import __version__
from bridge.core.events import Event
from bridge.fronts.api_schemas import components
from bridge.schema import a2a, a2a_card, chat, chat_api

__all__ = ["build_openapi"]

_PREFIX = "#/components/schemas/"
_NAMED: list[Any] = [
    chat_api.CreateSession, chat_api.PromptBody, chat_api.AnswerBody, chat_api.CancelBody, chat_api.ErrorBody,
    chat_api.SessionCreated, chat_api.SessionList, chat_api.SessionDetail, chat_api.Deleted, chat_api.TurnAccepted,
    chat_api.Answered, chat_api.Cancelled, chat_api.RouteList, chat.TurnProjection,
    a2a.SendMessageRequest, a2a.SendMessageResponse, a2a.Task, a2a.ListTasksResponse, a2a.StreamResponse,
    a2a.TaskPushNotificationConfig, a2a.ListTaskPushNotificationConfigsResponse, a2a.RestError, a2a_card.AgentCard,
]  # fmt: skip

_CHAT_AUTH: list[dict[str, list[str]]] = [{}, {"chatBearer": []}]  # optional: only when [ws] sets a token
_A2A_AUTH: list[dict[str, list[str]]] = [{}, {"a2aBearer": []}]  # optional: only when the route sets one


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _PREFIX + name}


def _json(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


def _sse(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/event-stream": {"schema": {"type": "string"}}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"$ref": f"#/components/responses/E{s}"} for s in statuses}


def _param(name: str, where: str, schema: dict[str, Any], description: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path", "schema": schema, "description": description}


_SID = _param("session_id", "path", {"type": "string"}, "The session's id.")
_ROUTE = _param("route", "path", {"type": "string"}, "A route exposed over A2A (`[routes.NAME.a2a] expose`).")
_TASK = _param("id", "path", {"type": "string"}, "The task's id.")
_INT = {"type": "integer", "minimum": 0}


def _op(summary: str, responses: dict[str, Any], *, tag: str, security: list[Any], op_id: str,
        body: str | None = None, params: list[dict[str, Any]] | None = None, description: str = "") -> dict[str, Any]:  # fmt: skip
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": [tag], "responses": responses, "security": security}
    if description:
        op["description"] = description
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": tag == "a2a", "content": {"application/json": {"schema": _ref(body)}}}
    return op


def _chat(summary: str, responses: dict[str, Any], op_id: str, **kw: Any) -> dict[str, Any]:
    return _op(summary, responses, tag="sessions", security=_CHAT_AUTH, op_id=op_id, **kw)


def _chat_paths() -> dict[str, Any]:
    page_headers = {
        "X-Chat-Sequence": {"description": "The last frame number of the page's runs: on the newest page, the `after_sequence` to subscribe with.", "schema": {"type": "string"}},
        "X-Next-Cursor": {"description": "`before` for the next older page; absent on the oldest.", "schema": {"type": "string"}},
        "Link": {"description": 'The next older page, `<...>; rel="next"`.', "schema": {"type": "string"}},
    }  # fmt: skip
    listing = [
        _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "Sessions per page."),
        _param("offset", "query", {**_INT, "default": 0}, "Sessions to skip."),
        _param("route", "query", {"type": "string"}, "Only this route's sessions."),
        _param("front", "query", {"type": "string", "enum": ["acp", "a2a", "chat", "mcp", "cli"]}, "Only those opened through this front."),
        _param("status", "query", {"type": "string", "enum": ["created", "running", "waiting_for_input", "completed", "failed", "interrupted"]}, "Only sessions in this status."),
        _param("q", "query", {"type": "string"}, "A title search (any case)."),
        _param("counts", "query", {"type": "integer", "enum": [0, 1]}, "1: add the sessions counted by status, front and route."),
    ]  # fmt: skip
    events = [
        _param("after", "query", _INT, "Replay the events after this sequence number."),
        _param("tail_turns", "query", _INT, "Replay from the first event of the N newest turns."),
        _param("through", "query", _INT, "End after this sequence number (a finite page of older events)."),
        _param("Last-Event-ID", "header", {"type": "string"}, "Resume after this event (wins over `after`)."),
    ]  # fmt: skip
    return {
        "/api/sessions": {
            "post": _chat("Open a session", {"200": _json(_ref("SessionCreated"), "The new session."), **_errors(400, 401, 403, 404, 413, 415, 429)},
                          "createSession", body="CreateSession",
                          description="`route` defaults to the config's `default_route`. Unknown fields are a 400 naming them."),
            "get": _chat("List sessions, newest first", {"200": _json(_ref("SessionList"), "One page."), **_errors(400, 401)},
                         "listSessions", params=listing),
        },
        "/api/sessions/{session_id}": {
            "parameters": [_SID],
            "get": _chat("One session, with its commands and last sequence number",
                         {"200": _json(_ref("SessionDetail"), "The session."), **_errors(401, 403, 404)}, "getSession"),
            "delete": _chat("Stop a session's run and forget it and its events",
                            {"200": _json(_ref("Deleted"), "Deleted."), **_errors(401, 403, 404)}, "deleteSession"),
        },
        "/api/sessions/{session_id}/messages": {
            "parameters": [_SID],
            "get": _chat(
                "A page of the session's history as chat turn projections, oldest first",
                {"200": _json({"type": "array", "items": _ref("TurnProjection")}, "The turns of the newest `limit` runs before `before`.", page_headers),
                 **_errors(400, 401, 403, 404)},
                "getMessages",
                params=[_param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "Runs per page."),
                        _param("before", "query", {"type": "string"}, "The cursor of `X-Next-Cursor`.")],
            ),  # fmt: skip
        },
        "/api/sessions/{session_id}/events": {
            "parameters": [_SID],
            "get": _chat(
                "The session's canonical events (server-sent events)",
                {"200": _sse("`retry: 1000`, then each event as `id: <seq>`, `event: <its tag>`, `data: <CanonicalEvent as JSON>`; "
                             "after the replay `event: caught_up` (`CaughtUp`); then live events; `event: gone` when the session "
                             "is deleted (`{}`), or when a reload's access rules refuse the caller the session "
                             "(`{\"reason\": \"access\", \"detail\"}`)."), **_errors(400, 401, 403, 404, 503)},
                "streamEvents", params=events,
            ),  # fmt: skip
        },
        "/api/sessions/{session_id}/prompt": {
            "parameters": [_SID],
            "post": _chat("Start a turn", {"202": _json(_ref("TurnAccepted"), "The turn started."), **_errors(400, 401, 403, 404, 409, 429)},
                          "prompt", body="PromptBody", description="409: a turn is running."),
        },
        "/api/sessions/{session_id}/answer": {
            "parameters": [_SID],
            "post": _chat("Answer the running turn's open question", {"200": _json(_ref("Answered"), "Answered."), **_errors(400, 401, 403, 404)},
                          "answer", body="AnswerBody"),
        },
        "/api/sessions/{session_id}/cancel": {
            "parameters": [_SID],
            "post": _chat("Cancel the running turn", {"200": _json(_ref("Cancelled"), "`cancelled` false: nothing ran."), **_errors(400, 401, 403, 404)},
                          "cancel", body="CancelBody"),
        },
        "/api/changes": {
            "get": _chat("The change feed of the session list (server-sent events)",
                         {"200": _sse("`event: session` (`SessionInfo`) when a session is created, a turn starts or ends, a question is "
                                      "asked or answered; `event: deleted` (`{session_id}`); `event: reset` (`{}`: read the list again)."),
                          **_errors(400, 401, 503)}, "changes"),
        },
        "/api/routes": {
            "get": _chat("The routes, their commands, options and health", {"200": _json(_ref("RouteList"), "Every route."), **_errors(401)},
                         "listRoutes"),
        },
    }  # fmt: skip


def _a2a(summary: str, responses: dict[str, Any], op_id: str, **kw: Any) -> dict[str, Any]:
    errors = {"default": {"$ref": "#/components/responses/A2AError"}}
    return _op(summary, {**responses, **errors}, tag="a2a", security=_A2A_AUTH, op_id=op_id, **kw)


def _a2a_paths() -> dict[str, Any]:
    base = "/a2a/{route}"
    version = _param("A2A-Version", "header", {"type": "string", "enum": ["1.0"]}, "Required for these 1.0 paths (without it a request is 0.3).", required=True)  # fmt: skip
    stream = "Server-sent events, each `data:` one `StreamResponse`."
    history = _param("historyLength", "query", _INT, "Messages of history to include.")
    listing = [
        _param("contextId", "query", {"type": "string"}, "Only this context's tasks."),
        _param("status", "query", {"type": "string"}, "Only tasks in this state (`TASK_STATE_...`)."),
        _param("pageSize", "query", {"type": "integer", "minimum": 1}, "Tasks per page."),
        _param("pageToken", "query", {"type": "string"}, "`nextPageToken` of the previous page."),
        history,
        _param("statusTimestampAfter", "query", {"type": "string"}, "Only tasks whose status changed after (RFC 3339)."),
        _param("includeArtifacts", "query", {"type": "boolean"}, "Include the artifacts."),
    ]  # fmt: skip
    task = [_ROUTE, _TASK, version]
    config = _param("config_id", "path", {"type": "string"}, "The push notification config's id.")
    card = {"200": _json(_ref("AgentCard"), "The agent card.")}
    return {
        "/.well-known/agent-card.json": {"get": _op("The default route's agent card", card, tag="a2a", security=[], op_id="defaultAgentCard")},
        base + "/.well-known/agent-card.json": {
            "get": _op("The route's agent card (no auth)", card, tag="a2a", security=[], op_id="agentCard", params=[_ROUTE]),
        },
        base: {"post": _a2a("JSON-RPC 2.0: every A2A method of 1.0 (`SendMessage`, …) and 0.3 (`message/send`, …)",
                            {"200": _json({"type": "object"}, "The JSON-RPC response (errors too are HTTP 200).")},
                            "jsonRpc", body="JsonRpcRequest", params=[_ROUTE])},
        base + "/message:send": {"post": _a2a("SendMessage", {"200": _json(_ref("SendMessageResponse"), "The task or message.")},
                                              "sendMessage", body="SendMessageRequest", params=[_ROUTE, version])},
        base + "/message:stream": {"post": _a2a("SendStreamingMessage", {"200": _sse(stream)}, "sendStreamingMessage",
                                                body="SendMessageRequest", params=[_ROUTE, version])},
        base + "/tasks": {"get": _a2a("ListTasks", {"200": _json(_ref("ListTasksResponse"), "One page of tasks.")}, "listTasks",
                                      params=[_ROUTE, version, *listing])},
        base + "/tasks/{id}": {"get": _a2a("GetTask", {"200": _json(_ref("Task"), "The task.")}, "getTask", params=[*task, history])},
        base + "/tasks/{id}:cancel": {"post": _a2a("CancelTask", {"200": _json(_ref("Task"), "The task, canceled.")}, "cancelTask", params=task)},
        base + "/tasks/{id}:subscribe": {
            "get": _a2a("SubscribeToTask", {"200": _sse(stream)}, "subscribeToTask", params=task),
            "post": _a2a("SubscribeToTask", {"200": _sse(stream)}, "subscribeToTaskPost", params=task),
        },
        base + "/tasks/{id}/pushNotificationConfigs": {
            "post": _a2a("CreateTaskPushNotificationConfig", {"200": _json(_ref("TaskPushNotificationConfig"), "The config stored.")},
                         "createPushConfig", body="TaskPushNotificationConfig", params=task),
            "get": _a2a("ListTaskPushNotificationConfigs", {"200": _json(_ref("ListTaskPushNotificationConfigsResponse"), "The configs.")},
                        "listPushConfigs", params=task),
        },
        base + "/tasks/{id}/pushNotificationConfigs/{config_id}": {
            "get": _a2a("GetTaskPushNotificationConfig", {"200": _json(_ref("TaskPushNotificationConfig"), "The config.")},
                        "getPushConfig", params=[*task, config]),
            "delete": _a2a("DeleteTaskPushNotificationConfig", {"200": {"description": "Deleted (an empty body)."}},
                           "deletePushConfig", params=[*task, config]),
        },
        base + "/extendedAgentCard": {"get": _a2a("GetExtendedAgentCard", card, "extendedAgentCard", params=[_ROUTE, version])},
    }  # fmt: skip


def _other_paths() -> dict[str, Any]:
    doc = {"200": _json({"type": "object"}, "The document.")}
    return {
        "/healthz": {"get": _op("Alive", {"200": _json(_ref("Alive"), "Alive.")}, tag="daemon", security=[], op_id="healthz")},
        "/readyz": {"get": _op("Ready: listeners bound, store open, not stopping (details with the admin token)",
                               {"200": _json({"type": "object"}, "Ready."), "503": _json({"type": "object"}, "Not ready, and why.")},
                               tag="daemon", security=[{}, {"adminBearer": []}], op_id="readyz")},
        "/metrics": {"get": _op("Prometheus metrics (the admin token with `[server] metrics_need_token`)",
                                {"200": {"description": "The Prometheus text format.", "content": {"text/plain": {"schema": {"type": "string"}}}}},
                                tag="daemon", security=[{}, {"adminBearer": []}], op_id="metrics")},
        "/api/openapi.json": {"get": _op("This document", doc, tag="daemon", security=[], op_id="openapi")},
        "/api/asyncapi.json": {"get": _op("The AsyncAPI 3.0 document of /ws", doc, tag="daemon", security=[], op_id="asyncapi")},
    }  # fmt: skip


def _hand_schemas() -> dict[str, Any]:
    """What no Struct says: the SSE frames' small bodies and `/healthz`."""
    return {
        "CaughtUp": {
            "type": "object",
            "properties": {"last_seq": {"type": "integer"}, "first_seq": {"type": "integer"}, "earlier": {"type": "boolean"}},
            "required": ["last_seq", "first_seq", "earlier"],
            "description": "`event: caught_up`: the replay is written (`earlier`: events before `first_seq` exist).",
        },
        "JsonRpcRequest": {
            "type": "object",
            "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]}, "method": {"type": "string"},
                           "params": {"type": "object"}},
            "required": ["jsonrpc", "method"],
        },
        "Alive": {
            "type": "object",
            "properties": {"status": {"const": "ok"}, "worker": {"type": "integer", "description": "Which of `serve --workers N` answered."}},
            "required": ["status"],
        },
    }  # fmt: skip


def build_openapi() -> dict[str, Any]:
    """The document, as a JSON value (a new one each call)."""
    schemas, named = components([*_NAMED, Event], _PREFIX)
    named["CanonicalEvent"] = {**schemas[-1], "description": "One event of the canonical turn model (bridge/core/events.py), tagged by `event`."}
    named.update(_hand_schemas())
    error = _json(_ref("ErrorBody"), "")
    words = {400: "Bad request: a parameter or body field (named)", 401: "A bearer token is required", 403: "The caller may not do this with the session or route (`[routes.NAME.access]`)",
             404: "No such session or route",
             409: "A turn is running", 413: "The body is over `[server] max_body_bytes`", 415: "The body is not JSON",
             429: "Over the route's `[limits]`: `Retry-After` says when to try again",
             503: "Too many event streams (`[ws] max_event_streams`)"}  # fmt: skip
    responses = {f"E{s}": {**error, "description": text} for s, text in words.items()}
    responses["A2AError"] = _json(_ref("RestError"), "An A2A error (`google.rpc.Status` with an `ErrorInfo`), with its mapped HTTP status.")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agent-bridge HTTP APIs",
            "version": __version__,
            "description": (
                "The chat REST API and the canonical API beside `/ws` (whose frames are in `/api/asyncapi.json`), and each "
                "route's A2A 1.0 HTTP+JSON binding. Errors are `{\"detail\"}` with the status of bridge/errors.py. "
                "Browser pages are held to one policy (Host, Origin, Content-Type: README, Security and limits)."
            ),
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": "/", "description": "The daemon that served this document."}],
        "tags": [
            {"name": "sessions", "description": "Chat sessions and the canonical API (bridge/fronts/chat/)."},
            {"name": "a2a", "description": "Every route as an A2A agent (0.3: the same paths under `/a2a/{route}/v1`; JSON-RPC: POST `/a2a/{route}`)."},
            {"name": "daemon", "description": "The daemon itself."},
        ],
        "paths": {**_chat_paths(), **_a2a_paths(), **_other_paths()},
        "components": {
            "schemas": named,
            "responses": responses,
            "securitySchemes": {
                "chatBearer": {"type": "http", "scheme": "bearer", "description": "`[ws] token_env` / `token_file`, when set."},
                "adminBearer": {"type": "http", "scheme": "bearer", "description": "`[server] admin_token_env` / `admin_token_file`."},
                "a2aBearer": {"type": "http", "scheme": "bearer", "description": "`[routes.NAME.a2a] token_env` / `token_file`, when set "
                              "(or the header `api_key_header` names)."},
            },
        },
    }  # fmt: skip
