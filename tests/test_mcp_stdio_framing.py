"""The MCP stdio framing (`ndjson_transport`) keeps a line it must drop bounded in memory
and answers it, as `agent-bridge mcp` and stdio prompt sources rely on."""

from __future__ import annotations

import json

import trio
import trio.testing

from bridge.prompts.mcp_source import ndjson_transport


async def test_an_oversized_line_is_answered_and_the_next_one_still_reaches_the_sdk() -> None:
    client_side, server_side = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with ndjson_transport(server_side, server_side, answer_parse_errors=True, max_frame_bytes=1024) as (reads, writes):
            # 1 MiB with no newline yet, in pieces: dropped as it streams, never held whole.
            for _ in range(16):
                await client_side.send_all(b"x" * 65536)
            ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
            await client_side.send_all(b"\n" + json.dumps(ping).encode() + b"\n")
            first = await reads.receive()
            assert isinstance(first, ValueError) and "1024" in str(first)
            second = await reads.receive()
            assert second.message.id == 7 and second.message.method == "ping"
            answer = b""
            while b"\n" not in answer:
                answer += await client_side.receive_some(65536)
            error = json.loads(answer.split(b"\n")[0])
            assert error["id"] is None and error["error"]["code"] == -32600
