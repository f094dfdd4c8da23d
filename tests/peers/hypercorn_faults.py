"""Runs `agent-bridge` (argv[1:]) with faults planted inside hypercorn's per-connection code.

Not in our app: in hypercorn's own protocol layer, which its ASGI boundary does not
cover (tests/test_e2e_containment.py):

- `H11Protocol.handle` raises RuntimeError on bytes carrying `x-inject-fault`
  (an HTTP request head with that header);
- `WebsocketBuffer.extend` raises TypeError, the type of the fuzz-found crash, on a
  WebSocket message carrying `inject-fault`.

Usage: python hypercorn_faults.py /path/to/agent-bridge serve --config ...
"""

from __future__ import annotations

import runpy
import sys
from typing import Any

from hypercorn.events import RawData
from hypercorn.protocol import h11 as hypercorn_h11
from hypercorn.protocol import ws_stream

_handle = hypercorn_h11.H11Protocol.handle
_extend = ws_stream.WebsocketBuffer.extend


async def handle(self: Any, event: Any) -> None:
    if isinstance(event, RawData) and b"x-inject-fault" in event.data.lower():
        raise RuntimeError("injected fault in hypercorn's HTTP/1.1 protocol")
    await _handle(self, event)


def extend(self: Any, event: Any) -> None:
    data = event.data if isinstance(event.data, bytes) else event.data.encode()
    if b"inject-fault" in data:
        raise TypeError("injected fault in hypercorn's WebSocket message buffer")
    _extend(self, event)


hypercorn_h11.H11Protocol.handle = handle  # type: ignore[method-assign]
ws_stream.WebsocketBuffer.extend = extend  # type: ignore[method-assign]

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
