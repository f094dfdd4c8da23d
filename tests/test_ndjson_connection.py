"""`NdjsonConnection` (bridge/transport/ndjson.py) on trio memory streams.

Cancellation both ways through the one JSON-RPC peer (ACP schema,
`CancelRequestNotification`): a request of ours given up on (its timeout, or the
waiting task cancelled) or withdrawn is withdrawn on the wire with `$/cancel_request`;
the peer's `$/cancel_request` for a request we serve stops that request's handler
alone, which is answered -32800 (ACP schema, `ErrorCode` "Request cancelled"); a
cancellation from outside is never swallowed. An id still in flight is refused -32600.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any

import trio
import trio.testing

from bridge.codecs.jsonrpc import Call
from bridge.codecs.jsonrpc_peer import CancelRequested, UnknownReply
from bridge.transport.ndjson import NdjsonConnection

log = logging.getLogger("test.ndjson")


class Wire:
    """The far end: what the connection wrote, frame by frame."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buf = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            self.buf += await self.stream.receive_some()
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    async def nothing_within(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await self.next()
            return False
        return True


def connection() -> tuple[NdjsonConnection, Wire]:
    send, receive = trio.testing.memory_stream_one_way_pair()
    return NdjsonConnection(send, max_outbox_items=64, log=log), Wire(receive)


CANCEL_1 = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}


async def test_a_wait_that_times_out_withdraws_the_request() -> None:
    conn, wire = connection()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            assert await conn.request("fs/read_text_file", {"path": "/a"}, timeout_s=0.05) is None
            assert (await wire.next())["method"] == "fs/read_text_file"
            assert await wire.next() == CANCEL_1
            late = conn.peer.receive(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"cancelled"}}')
            assert type(late) is UnknownReply
            nursery.cancel_scope.cancel()


async def test_a_waiting_task_cancelled_withdraws_its_request() -> None:
    conn, wire = connection()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            with trio.move_on_after(0.05):
                await conn.request("terminal/wait_for_exit", {})
            assert (await wire.next())["method"] == "terminal/wait_for_exit"
            assert await wire.next() == CANCEL_1
            assert not conn.peer.pending
            nursery.cancel_scope.cancel()


async def test_an_answered_or_abandoned_request_is_not_withdrawn() -> None:
    conn, wire = connection()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            pending = conn.start_request("a", {})
            conn.settled(conn.peer.receive(b'{"jsonrpc":"2.0","id":1,"result":{}}'))  # type: ignore[arg-type]
            assert await conn.wait(pending) is not None
            gone = conn.start_request("b", {})
            conn.abandon_all()
            assert await conn.wait(gone) is None
            assert [(await wire.next())["method"] for _ in range(2)] == ["a", "b"]
            assert await wire.nothing_within(0.05)
            nursery.cancel_scope.cancel()


async def test_withdraw_sends_cancel_request_once_and_wakes_the_waiter() -> None:
    conn, wire = connection()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            pending = conn.start_request("session/request_permission", {})
            conn.withdraw(pending.id)
            conn.withdraw(pending.id)
            assert await conn.wait(pending, timeout_s=30) is None  # at once, not after 30 s
            assert (await wire.next())["method"] == "session/request_permission"
            assert await wire.next() == CANCEL_1
            assert await wire.nothing_within(0.05)
            nursery.cancel_scope.cancel()


async def test_the_peers_cancel_request_stops_that_handler_alone_answered_32800() -> None:
    conn, wire = connection()
    started = {"slow": trio.Event(), "other": trio.Event()}
    release = trio.Event()

    async def handler(call: Call) -> Any:
        started[call.method].set()
        await release.wait()
        return {"done": call.method}

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            nursery.start_soon(partial(conn.serve_call, Call(7, "slow", None), handler, what="test"))
            nursery.start_soon(partial(conn.serve_call, Call(8, "other", None), handler, what="test"))
            await started["slow"].wait()
            await started["other"].wait()
            cancel = conn.peer.receive(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}')
            assert type(cancel) is CancelRequested
            assert conn.cancel_served(cancel.request_id)
            answer = await wire.next()
            assert answer["id"] == 7 and answer["error"]["code"] == -32800, answer
            assert not conn.cancel_served(7)  # over: nothing left to cancel
            release.set()
            assert await wire.next() == {"jsonrpc": "2.0", "id": 8, "result": {"done": "other"}}
            nursery.cancel_scope.cancel()


async def test_a_cancellation_from_outside_is_not_answered_nor_swallowed() -> None:
    conn, wire = connection()
    entered = trio.Event()

    async def handler(call: Call) -> Any:
        entered.set()
        await trio.sleep_forever()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            with trio.CancelScope() as outer:
                async with trio.open_nursery() as inner:
                    inner.start_soon(partial(conn.serve_call, Call(3, "x", None), handler, what="test"))
                    await entered.wait()
                    outer.cancel()
            assert outer.cancelled_caught  # the Cancelled went through serve_call to its scope
            assert not conn.cancel_served(3)
            assert await wire.nothing_within(0.05)
            nursery.cancel_scope.cancel()


async def test_an_id_still_in_flight_is_refused_32600() -> None:
    conn, wire = connection()
    release = trio.Event()

    async def handler(call: Call) -> Any:
        await release.wait()
        return "first"

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.write_loop)
            nursery.start_soon(partial(conn.serve_call, Call("a", "x", None), handler, what="test"))
            await trio.testing.wait_all_tasks_blocked()
            await conn.serve_call(Call("a", "y", None), handler, what="test")
            refused = await wire.next()
            assert refused["id"] == "a" and refused["error"]["code"] == -32600, refused
            release.set()
            assert (await wire.next()) == {"jsonrpc": "2.0", "id": "a", "result": "first"}
            # Answered: the id is free again.
            await conn.serve_call(Call("a", "z", None), handler, what="test")
            assert (await wire.next())["result"] == "first"
            nursery.cancel_scope.cancel()
