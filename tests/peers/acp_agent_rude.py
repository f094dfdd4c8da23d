"""A deliberately rude ACP agent on the standard library alone (no SDK: it must be able to
break the framing an SDK would never break). The fault-injection suite spawns it as an
ACP back (tests/test_e2e_faults.py).

It answers `initialize`, `session/new` and `session/cancel`; `session/prompt` runs the
words of the prompt text in order:

    hello       one agent_message_chunk "hello", then end_turn
    pid         one chunk "pid=<pid>" (the test may SIGSTOP or SIGKILL it)
    slow        a chunk every 20 ms until session/cancel (then "cancelled"), at most 60 s
    flood:N     N agent_message_chunk lines written as fast as the pipe takes them
    noline:N    N bytes of "x" with no newline, then silence (the frame never ends)
    bigline:N   answers the prompt with one line of N bytes (an oversized frame)
    hostile     three session/update lines no decoder may choke on (an integer beyond
                64 bits in _meta, invalid UTF-8 in a text, 100 000 nested arrays), then "after"

Lines it cannot parse are ignored (it is rude, not fragile).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

_out = sys.stdout.buffer
_lock = threading.Lock()
_cancelled: set[str] = set()


def send(msg: dict[str, Any]) -> None:
    data = json.dumps(msg).encode() + b"\n"
    with _lock:
        _out.write(data)
        _out.flush()


def chunk(sid: str, text: str) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})  # fmt: skip


def prompt(rid: Any, sid: str, text: str) -> None:
    for word in text.split():
        name, _, arg = word.partition(":")
        if name == "hello":
            chunk(sid, "hello")
        elif name == "pid":
            chunk(sid, f"pid={os.getpid()}")
        elif name == "slow":
            end = time.monotonic() + 60
            n = 0
            while sid not in _cancelled and time.monotonic() < end:
                chunk(sid, f"tick{n} ")
                n += 1
                time.sleep(0.02)
            if sid in _cancelled:
                _cancelled.discard(sid)
                chunk(sid, "cancelled")
                send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "cancelled"}})
                return
        elif name == "flood":
            for i in range(int(arg or 1000)):
                chunk(sid, f"f{i} ")
        elif name == "noline":
            with _lock:
                left = int(arg or 1 << 20)
                while left > 0:
                    n = min(left, 1 << 16)
                    _out.write(b"x" * n)
                    left -= n
                _out.flush()
            threading.Event().wait()  # the frame never ends
        elif name == "hostile":
            head = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + sid.encode() + b'","update":'
            with _lock:
                _out.write(head + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"big",'
                           b'"_meta":{"n":-18446744073709551616}}}}}\n')
                _out.write(head + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\xff\xfe"}}}}\n')
                _out.write(head + b"[" * 100_000 + b"]" * 100_000 + b"}}\n")
                _out.flush()
            chunk(sid, "after")
        elif name == "bigline":
            send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn", "_meta": {"pad": "x" * int(arg)}}})
            return
    send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})


def main() -> None:
    sessions = 0
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
        elif method == "session/new":
            sessions += 1
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": f"rude-{os.getpid()}-{sessions}"}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
            threading.Thread(target=prompt, args=(rid, params.get("sessionId", ""), text), daemon=True).start()
        elif method == "session/cancel":
            _cancelled.add(params.get("sessionId", ""))
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
