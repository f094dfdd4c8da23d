"""End to end: WebSocket framing faults on `/ws` close that socket, never the daemon.

Found by tests/test_e2e_fuzz.py (`test_fuzz_ws_frames`): after hypercorn closes a
socket for a message over its `websocket_max_message_size` (1009), it leaves that
message's bytes in its per-connection buffer (hypercorn 0.18 `WSStream._handle_events`
breaks out without clearing it). The next data frame from the client, of the other
type, was appended to it (`TypeError: a bytes-like object is required, not 'str'`),
and that exception took the whole daemon down. Each case here is played on a raw
socket (any frame at all), then a normal `/ws` client must still get a turn done and
the daemon must have logged no traceback.

Synchronisation is on frames seen and on end of stream, never on sleeps.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from daemon_support import Daemon, base_config, demo_route, raw_ws, start_daemon, ws_frame

CEILING_S = 30
LIMIT = 4096  # [ws] max_frame_bytes and [server] max_body_bytes: hypercorn's limit is LIMIT + 1
TEXT, BINARY, CONTINUATION, CLOSE = 1, 2, 0, 8


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return clean_env


def config(tmp_path: Path) -> dict[str, object]:
    return base_config(
        tmp_path,
        {"demo": demo_route()},
        default_route="demo",
        server={"max_body_bytes": LIMIT},
        ws={"max_frame_bytes": LIMIT},
        daemon={"shutdown_grace_s": 1},
    )


class Frames:
    """The server's frames on a raw socket: (opcode, payload), None at end of stream."""

    def __init__(self, stream: trio.SocketStream, buf: bytes) -> None:
        self.stream = stream
        self.buf = buf

    async def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            try:
                chunk = await self.stream.receive_some(1 << 16)
            except trio.BrokenResourceError:
                return False
            if not chunk:
                return False
            self.buf += chunk
        return True

    async def next(self) -> tuple[int, bytes] | None:
        if not await self._need(2):
            return None
        n, at = self.buf[1] & 0x7F, 2
        if n == 126:
            if not await self._need(4):
                return None
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            if not await self._need(10):
                return None
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        if not await self._need(at + n):
            return None
        opcode, payload = self.buf[0] & 0x0F, self.buf[at : at + n]
        self.buf = self.buf[at + n :]
        return opcode, payload

    async def close_code(self) -> int:
        """The code of the server's close frame (data frames before it are skipped)."""
        while True:
            got = await self.next()
            assert got is not None, "the connection ended without a close frame"
            if got[0] == CLOSE:
                return struct.unpack("!H", got[1][:2])[0] if len(got[1]) >= 2 else 1005

    async def end(self) -> None:
        """Read to the end of the stream: the server has handled all we sent."""
        while await self.next() is not None:
            pass


async def still_serves(d: Daemon, *, log_from: int = 0) -> None:
    """The daemon is up and a normal /ws client gets a whole turn; no traceback logged
    (from `log_from` on)."""
    assert d.proc.returncode is None, f"the daemon died: {d.log_text()[-4000:]}"
    async with httpx.AsyncClient(base_url=d.url, timeout=10) as h:
        r = await h.post("/api/sessions", json={"route": "demo"})
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
        await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "alive"}}))
        while True:
            frame = json.loads(await ws.get_message())
            assert frame["event"] != "system:error", frame
            if frame["event"] == "chat:end":
                assert frame["data"]["status"] == "completed", frame
                break
    text = d.log_text()[log_from:]
    assert "Traceback" not in text, text[-6000:]


async def test_a_data_frame_inside_a_fragmented_message_fails_the_connection_with_1002(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    # RFC 6455 §5.4: the fragments of one message are not interleaved with another
    # message's; a new text or binary frame before the final fragment fails the
    # connection (§7.1.7), with 1002 (§7.4.1).
    sequences = [
        [ws_frame(b'{"event":', TEXT, fin=False), ws_frame(b"\x00\x01", BINARY)],
        [ws_frame(b"\x00\x01", BINARY, fin=False), ws_frame(b'{"event": "x"}', TEXT)],
        [ws_frame(b'{"ev', TEXT, fin=False), ws_frame(b'ent":', CONTINUATION, fin=False), ws_frame(b"\x00", BINARY)],
        [ws_frame(b'{"event": "x"}', CONTINUATION)],  # a continuation with nothing to continue
    ]
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            for frames in sequences:
                stream, rest = await raw_ws(d.url)
                async with stream:
                    for frame in frames:
                        await stream.send_all(frame)
                    got = Frames(stream, rest)
                    assert await got.close_code() == 1002
                    await got.end()
            await still_serves(d)


@pytest.mark.parametrize(("big", "then"), [(BINARY, TEXT), (TEXT, BINARY)], ids=["binary-then-text", "text-then-binary"])
async def test_a_message_after_an_oversized_one_of_the_other_type_closes_only_that_socket(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str], big: int, then: int
) -> None:
    # Over hypercorn's limit (LIMIT + 1), so hypercorn itself closes with 1009 (§7.4.1),
    # not the chat front. What the client sends after that close frame reaches the
    # server as new data: the crash was there. Several sizes, so the oversized message
    # also arrives split over several reads (hypercorn fails on the part that crosses).
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            for size in (LIMIT + 2, 4 * LIMIT, 400 * LIMIT):
                stream, rest = await raw_ws(d.url)
                async with stream:
                    payload = b'"' + b"y" * (size - 2) + b'"'
                    await stream.send_all(ws_frame(payload, big))
                    got = Frames(stream, rest)
                    assert await got.close_code() == 1009
                    await stream.send_all(ws_frame(b'{"event": "session:subscribe", "data": {}}', then))
                    await stream.send_all(ws_frame(struct.pack("!H", 1000), CLOSE))  # the closing handshake (§5.5.1)
                    await got.end()
                await still_serves(d)
