"""The AsyncAPI 3.0 document of the chat event stream (`/ws`), served at `/api/asyncapi.json`.

What is written by hand here is what no Struct says: the frame names, which side sends
each, the channel, the operations and the security. Every payload's `data` schema is
generated from the Struct the daemon decodes or encodes it with (bridge/schema/chat.py,
through bridge/fronts/api_schemas.py). The document describes the daemon (AsyncAPI 3.0
§3.3.1): its `receive` operations are the client's frames, its `send` operations its own.
docs/chat-protocol.md shows each frame with an example; tests check both against the
running daemon.
"""

from __future__ import annotations

from typing import Any

from bridge import __version__
from bridge.fronts.api_schemas import components, for_asyncapi
from bridge.schema import chat

__all__ = ["CLIENT_FRAMES", "SERVER_FRAMES", "PATCHES", "build_asyncapi"]

_PREFIX = "#/components/schemas/"

# frame name → (the Struct of its `data`, what it is for). Client frames: bridge/schema/chat.py
# CLIENT_EVENTS, checked against it by the tests.
CLIENT_FRAMES: dict[str, tuple[type, str]] = {
    "session:subscribe": (
        chat.Subscribe,
        "Watch a session: every frame after `after_sequence` is replayed, then the live ones; "
        "without it, live frames only. Answered with `session:subscribed`, then `session:commands`.",
    ),
    "session:unsubscribe": (chat.SessionRef, "Stop watching a session."),
    "chat:send": (
        chat.SendMessage,
        "Start a run with `message` (a string, or a list of text, image_url and file items), or answer the "
        "session's open AskUserQuestion with `askuser_answer`. The sender is subscribed to the session (live) "
        "if it was not. `headless` or `output_schema`: a run whose `chat:end` carries the structured result.",
    ),
    "chat:stop": (chat.SessionRef, "Cancel the session's running run: it ends with `chat:end` status `interrupted`."),
}

SERVER_FRAMES: dict[str, tuple[type, str]] = {
    "session:subscribed": (chat.Subscribed, "Acknowledges `session:subscribe`: `sequence` is the last frame sent before going live."),
    "session:commands": (
        chat.SessionCommands,
        "The session's slash commands, after `session:subscribed` and whenever they change. Not numbered, not replayed.",
    ),
    "chat:start": (chat.ChatStart, "A run begins (`chat_run_id` is its turn id)."),
    "turn:start": (chat.TurnProjection, "A turn begins: the user's message, the assistant's answer, or a sub-agent's (fork) turn."),
    "turn:patch": (chat.PatchEnvelope, "A change to a turn: `patch_type` says which, `data` carries it."),
    "turn:end": (chat.TurnProjection, "A turn as it ended (`status` completed, paused, failed or interrupted)."),
    "chat:end": (chat.ChatEnd, "A run ends: `status` completed, interrupted or failed; `result` the headless output."),
    "system:error": (
        chat.SystemError,
        "An error: of a frame the client sent (no `sequence`), or of a failed run (with its `sequence`).",
    ),
}

# turn:patch `patch_type` → the Struct of its `data`.
PATCHES: dict[str, type] = {
    "add_content": chat.AddContent,
    "add_tool_call": chat.AddToolCall,
    "tool_result": chat.ToolResult,
    "set_status": chat.SetStatus,
    "set_tool_status": chat.SetToolStatus,
}


def _id(frame: str) -> str:
    """A component key for a frame name (keys allow no colon, AsyncAPI 3.0 §3.3.34)."""
    head, _, tail = frame.partition(":")
    return head + "".join(w[:1].upper() + w[1:] for w in tail.split("_"))


def _frame_schema(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"event": {"type": "string", "const": name}, "data": data},
        "required": ["event", "data"],
    }


def _patch_data() -> dict[str, Any]:
    """`turn:patch`: the envelope with `data` said per `patch_type`."""
    return {
        "allOf": [
            {"$ref": _PREFIX + "PatchEnvelope"},
            {
                "oneOf": [
                    {
                        "properties": {"patch_type": {"const": kind}, "data": {"$ref": _PREFIX + typ.__name__}},
                        "required": ["patch_type"],
                        "additionalProperties": True,  # the envelope's other fields, said above
                    }
                    for kind, typ in PATCHES.items()
                ]
            },
        ]
    }


def build_asyncapi() -> dict[str, Any]:
    """The document, as a JSON value (a new one each call)."""
    types = [t for t, _ in CLIENT_FRAMES.values()] + [t for t, _ in SERVER_FRAMES.values()] + list(PATCHES.values())
    _, named = components([*types, chat.AuthInfo], _PREFIX)
    messages: dict[str, Any] = {}
    for frames in (CLIENT_FRAMES, SERVER_FRAMES):
        for name, (typ, about) in frames.items():
            data = _patch_data() if name == "turn:patch" else {"$ref": _PREFIX + typ.__name__}
            payload = _frame_schema(name, data)
            if frames is CLIENT_FRAMES:
                # The first frame may carry the token (`auth`), and nothing else need be in it.
                payload["properties"]["auth"] = {"$ref": _PREFIX + "AuthInfo"}
            messages[_id(name)] = {"name": name, "title": name, "summary": about, "payload": payload}
    messages["auth"] = {
        "name": "auth",
        "title": "auth",
        "summary": "The token alone, as the first frame (when the upgrade carried no `Authorization` header).",
        "payload": {"type": "object", "properties": {"auth": {"$ref": _PREFIX + "AuthInfo"}}, "required": ["auth"]},
    }
    channel_messages = {key: {"$ref": f"#/components/messages/{key}"} for key in messages}
    operations: dict[str, Any] = {}
    sides = [(name, about, "receive") for name, (_, about) in CLIENT_FRAMES.items()]
    sides += [("auth", messages["auth"]["summary"], "receive")]
    sides += [(name, about, "send") for name, (_, about) in SERVER_FRAMES.items()]
    for name, about, action in sides:
        key = _id(name)
        operations[("on" if action == "receive" else "send") + key[:1].upper() + key[1:]] = {
            "action": action,
            "channel": {"$ref": "#/channels/chat"},
            "summary": about,
            "messages": [{"$ref": f"#/channels/chat/messages/{key}"}],
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "agent-bridge chat event stream",
            "version": __version__,
            "description": (
                "JSON frames `{\"event\": NAME, \"data\": {...}}` over a plain WebSocket at `/ws` (RFC 6455), with the "
                "event names and payloads of the Blade Agent API (api/chat-flow.md). Every frame of a session's runs "
                "carries the session's `sequence`, gapless from 1, so a client resumes with `session:subscribe` "
                "`after_sequence`. docs/chat-protocol.md shows each frame with an example."
            ),
            "license": {"name": "MIT"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "daemon": {
                "host": "127.0.0.1:8765",
                "protocol": "ws",
                "description": "`agent-bridge serve` ([server] listen). The same token as the REST API when `[ws]` sets one.",
                "security": [{"$ref": "#/components/securitySchemes/bearer"}],
            }
        },
        "channels": {
            "chat": {
                "address": "/ws",
                "title": "The chat event stream",
                "description": (
                    "One connection may watch several sessions. Without an `Authorization: Bearer` header at the "
                    "upgrade, the first frame must carry `auth.token` when a token is configured (close 4401 otherwise)."
                ),
                "messages": channel_messages,
            }
        },
        "operations": operations,
        "components": {
            "messages": messages,
            "schemas": for_asyncapi(named),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`[ws] token_env` / `token_file`: at the upgrade, or as `auth.token` in the first frame.",
                }
            },
        },
    }
