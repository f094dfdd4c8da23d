"""The ceiling for bench/ws_stream.py: a plain trio-websocket server, no bridge in between.

    ws_ceiling.py FRAMES_FILE

FRAMES_FILE holds one captured bridge frame per line (the exact text the bridge sent).
Prints `ws://127.0.0.1:PORT/` on stdout once listening. Per connection, for each text
message received:
- "go":   send every frame of the file, one WebSocket message each, in order;
- "ping": answer with the file's first frame (one event, for round-trip latency);
- anything else: ignored (an idle connection, for memory per connection).
"""

from __future__ import annotations

import sys

import trio
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket


async def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        frames = [line.rstrip("\n") for line in f if line.strip()]

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            while True:
                message = await ws.get_message()
                if message == "go":
                    for frame in frames:
                        await ws.send_message(frame)
                elif message == "ping":
                    await ws.send_message(frames[0])
        except ConnectionClosed:
            pass

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
        print(f"ws://127.0.0.1:{server.port}/", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
