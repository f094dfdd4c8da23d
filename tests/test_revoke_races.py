"""A reload's access rules against a stream caught mid-way (bridge/session/grants.py):
one revoked while it replays a long history sends nothing stored after the reload, and
one whose request was checked before a reload that came while it opened does not run
on under the rules that refuse it."""

from __future__ import annotations

from typing import Any

import trio

from bridge.codecs.sse import SSEDecoder
from bridge.config import parse_config
from bridge.core.identity import SCOPE_KEY, Identity
from bridge.fronts import owners
from bridge.fronts.chat.events_api import CanonicalApi
from test_session import prompt, running

ALICE = Identity(subject="alice", via="jwt", issuer="i", claims={})
BOB = Identity(subject="bob", via="jwt", issuer="i", claims={"groups": ["ops"]})


def _config(*, ops: bool) -> Any:
    watch = {"watch": [{"claim": "groups", "contains": "ops"}]} if ops else {}
    return parse_config({
        "default_route": "demo", "store": {"flush_interval_s": 0.01},
        "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0.001}, "access": watch}},
    })  # fmt: skip


def _seqs(bodies: list[bytes], above: int) -> list[int]:
    events = [e for b in bodies for e in SSEDecoder().feed(b)]
    return [int(e.id) for e in events if e.id and e.event not in ("caught_up", "gone") and int(e.id) > above]


def _said_gone(body: bytes) -> bool:
    return any(e.event == "gone" and b"access" in e.data for e in SSEDecoder().feed(body))


def _gone(bodies: list[bytes]) -> bool:
    return any(_said_gone(b) for b in bodies)


async def test_a_stream_revoked_during_its_replay_gets_no_event_stored_after_the_reload() -> None:
    with trio.fail_after(30):
        async with running(_config(ops=True)) as manager:
            session = await manager.create("demo", cwd="/w", meta=owners.owned_by(ALICE))
            for i in range(40):  # several stored pages: the replay reads more than one
                await (await session.begin_turn(prompt(f"hello {i}"))).wait()
                await session.flush()
            at_reload, bodies, first, gate, gone = session.last_seq, [], trio.Event(), trio.Event(), trio.Event()

            async def send(message: dict[str, Any]) -> None:  # a slow client: its first page waits
                if b"id: " in message.get("body", b"") and not first.is_set():
                    first.set()
                    await gate.wait()
                bodies.append(message.get("body", b""))
                if _said_gone(bodies[-1]):
                    gone.set()

            canonical = CanonicalApi(_config(ops=True), manager, api=None)  # type: ignore[arg-type]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(canonical.serve_events, (session, 0, None, BOB), send, trio.sleep_forever, [])
                await first.wait()
                manager.reconfigure(_config(ops=False))  # SIGHUP: bob may no longer watch
                await (await session.begin_turn(prompt("after the reload"))).wait()
                await session.flush()
                gate.set()
                with trio.move_on_after(5):
                    await gone.wait()
                nursery.cancel_scope.cancel()
            assert _gone(bodies), bodies[-3:]
            assert not _seqs(bodies, at_reload), "bob hears a turn begun after his access was revoked"


async def test_a_reload_landing_while_a_stream_opens_does_not_let_it_escape() -> None:
    with trio.fail_after(30):
        async with running(_config(ops=True)) as manager:
            session = await manager.create("demo", cwd="/w", meta=owners.owned_by(ALICE))
            await (await session.begin_turn(prompt("hello"))).wait()
            await session.flush()
            reading, reloaded, list_turns, bodies = trio.Event(), trio.Event(), manager.store.list_turns, []
            gone = trio.Event()

            async def slow_list_turns(*a: Any, **kw: Any) -> Any:  # open_events' await after its check
                reading.set()
                await reloaded.wait()
                return await list_turns(*a, **kw)

            manager.store.list_turns = slow_list_turns  # type: ignore[method-assign]

            async def send(message: dict[str, Any]) -> None:
                bodies.append(message.get("body", b""))
                if _said_gone(bodies[-1]):
                    gone.set()

            canonical = CanonicalApi(_config(ops=True), manager, api=None)  # type: ignore[arg-type]

            async def open_and_serve() -> None:
                scope = {"query_string": b"tail_turns=1", "headers": [], SCOPE_KEY: BOB}
                opened = await canonical.open_events(scope, {"session_id": session.id})
                await canonical.serve_events(opened, send, trio.sleep_forever, [])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(open_and_serve)
                await reading.wait()
                manager.reconfigure(_config(ops=False))
                reloaded.set()
                with trio.move_on_after(5):
                    await gone.wait()
                at_reload = session.last_seq
                await (await session.begin_turn(prompt("after the reload"))).wait()
                nursery.cancel_scope.cancel()
            assert _gone(bodies), bodies
            assert not _seqs(bodies, at_reload), "a stream opened across the reload runs on under rules that refuse it"
