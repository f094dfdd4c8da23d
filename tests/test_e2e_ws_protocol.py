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

import struct
from pathlib import Path

import pytest
import trio

from daemon_support import RawWs, base_config, demo_route, raw_ws, start_daemon, still_serves, ws_frame

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
                    got = RawWs(stream, rest)
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
                    got = RawWs(stream, rest)
                    assert await got.close_code() == 1009
                    await stream.send_all(ws_frame(b'{"event": "session:subscribe", "data": {}}', then))
                    await stream.send_all(ws_frame(struct.pack("!H", 1000), CLOSE))  # the closing handshake (§5.5.1)
                    await got.end()
                await still_serves(d)
