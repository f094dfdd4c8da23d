"""The ceiling for bench/acp_stream.py: a plain trio NDJSON relay, stdin → stdout.

Every line is decoded and re-encoded with msgspec (typed Structs by default, plain
dicts with --dict), and everything one read yields is written with one `send_all`:
the "decode + encode every line, one write per read" row of
shared/reference/performance.md. No routing, no sessions, no backpressure logic:
what a Python relay of these exact messages can do on this machine.

The typed Structs mirror the bridge's ACP `session/update` notification field for
field and in the same order, so a bridge line goes out byte-identical (the bench
checks this).
"""

from __future__ import annotations

import os
import sys

import msgspec
import trio
from msgspec import UNSET, UnsetType


class TextContent(msgspec.Struct, tag_field="type", tag="text", omit_defaults=True):
    text: str


class AgentMessageChunk(msgspec.Struct, tag_field="sessionUpdate", tag="agent_message_chunk", omit_defaults=True):
    content: TextContent
    messageId: str | UnsetType = UNSET


class AgentThoughtChunk(msgspec.Struct, tag_field="sessionUpdate", tag="agent_thought_chunk", omit_defaults=True):
    content: TextContent
    messageId: str | UnsetType = UNSET


class UserMessageChunk(msgspec.Struct, tag_field="sessionUpdate", tag="user_message_chunk", omit_defaults=True):
    content: TextContent
    messageId: str | UnsetType = UNSET


class Params(msgspec.Struct):
    sessionId: str
    update: AgentMessageChunk | AgentThoughtChunk | UserMessageChunk


class Notification(msgspec.Struct, omit_defaults=True):
    method: str
    params: Params
    jsonrpc: str | UnsetType = UNSET  # kept only if present, where it was (last)


async def relay(typed: bool) -> None:
    decode = msgspec.json.Decoder(Notification if typed else object).decode
    encode = msgspec.json.Encoder().encode
    rx = trio.lowlevel.FdStream(os.dup(0))
    tx = trio.lowlevel.FdStream(os.dup(1))
    tail = b""
    async with rx, tx:
        while True:
            data = await rx.receive_some()
            if not data:
                break
            lines = (tail + data).split(b"\n") if tail else data.split(b"\n")
            tail = lines.pop()
            if lines:
                await tx.send_all(b"\n".join([encode(decode(line)) for line in lines if line]) + b"\n")
        if tail.strip():
            await tx.send_all(encode(decode(tail)) + b"\n")


def main() -> None:
    trio.run(relay, "--dict" not in sys.argv[1:])


if __name__ == "__main__":
    main()
