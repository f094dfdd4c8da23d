"""A minimal ACP agent without an SDK, for bench/acp_back.py: as fast as a pipe.

It answers `initialize`, `session/new` and `session/prompt`, whose text is
`bench:N` (N agent_message_chunk updates "x", written in batches of 256 lines) or
`pace:N:MS` (N updates, one every MS milliseconds, each "t=<CLOCK_MONOTONIC ns>").
Anything else is answered at once with end_turn. Stdlib only; blocking I/O.
"""

from __future__ import annotations

import json
import os
import sys
import time


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def line(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def update(sid: str, text: str) -> bytes:
    content = {"type": "text", "text": text}
    return line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk", "content": content}}})


def prompt(sid: str, text: str) -> None:
    word, _, arg = text.partition(":")
    if word == "bench":
        n = int(arg)
        one = update(sid, "x")
        batch = one * 256
        for _ in range(n // 256):
            write(batch)
        write(one * (n % 256))
    elif word == "pace":
        count, _, ms = arg.partition(":")
        pause = float(ms or 2) / 1000
        for _ in range(int(count)):
            write(update(sid, f"t={time.monotonic_ns()}"))
            time.sleep(pause)


def main() -> None:
    sessions = 0
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        msg = json.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue  # notifications (session/cancel): nothing to stop here
        if method == "initialize":
            result: object = {"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": {"name": "raw-bench-agent", "version": "1"}}
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"raw-{sessions}"}
        elif method == "session/prompt":
            params = msg["params"]
            prompt(params["sessionId"], "".join(b.get("text", "") for b in params["prompt"]))
            result = {"stopReason": "end_turn"}
        else:
            write(line({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}}))
            continue
        write(line({"jsonrpc": "2.0", "id": rid, "result": result}))


if __name__ == "__main__":
    main()
