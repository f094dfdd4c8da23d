"""Turn limits (bridge/session/limits.py): the token bucket, concurrency per route and per
caller, the LRU of callers, the configuration, and the error each protocol answers with.

Time is trio's MockClock (autojump): a test that waits a minute takes none.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.config import Config, ConfigError, Limits, parse_config
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import CODES, RateLimited, codes_for
from bridge.session.limits import TokenBucket, TurnLimits, effective


def cfg(limits: dict[str, Any] | None = None, route: dict[str, Any] | None = None) -> Config:
    raw: dict[str, Any] = {"routes": {"r": {"back": {"kind": "demo"}, "limits": route or {}}}}
    if limits is not None:
        raw["limits"] = limits
    return parse_config(raw)


ALICE = Identity(subject="alice", via="token")
BOB = Identity(subject="bob", via="jwt", issuer="https://issuer.example")


def refused(fn: Any) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        fn()
    return caught.value


# -- the bucket -------------------------------------------------------------------------------


def test_bucket_burst_then_rate() -> None:
    b = TokenBucket(per_minute=6, capacity=2, now=0.0)
    assert b.take(0.0) == 0.0 and b.take(0.0) == 0.0
    assert b.take(0.0) == pytest.approx(10.0)  # one every 10 s
    assert b.take(4.0) == pytest.approx(6.0)
    assert b.take(10.0) == 0.0
    assert b.take(100.0) == 0.0 and b.take(100.0) == 0.0 and b.take(100.0) > 0  # never more than the burst
    b.give_back()
    assert b.take(100.0) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    per_minute=st.floats(min_value=0.5, max_value=600),
    burst=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.floats(min_value=0, max_value=30), min_size=1, max_size=200),
)
def test_bucket_never_admits_more_than_burst_plus_rate(per_minute: float, burst: int, gaps: list[float]) -> None:
    """Whatever the timing, turns admitted by time t are at most burst + rate * t, and a
    refusal's wait is exactly when the next one would be admitted."""
    b = TokenBucket(per_minute, burst, now=0.0)
    now, admitted = 0.0, 0
    for gap in gaps:
        now += gap
        wait = b.take(now)
        if wait == 0.0:
            admitted += 1
        else:
            assert wait > 0 and math.isfinite(wait)
            probe = TokenBucket(per_minute, burst, 0.0)
            probe.tokens, probe.stamp = b.tokens, b.stamp
            assert probe.take(now + wait * (1 + 1e-9) + 1e-9) == 0.0
        assert admitted <= burst + per_minute / 60 * now + 1e-6


# -- TurnLimits on trio's clock ------------------------------------------------------------------


async def test_route_requests_per_minute(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg(route={"requests_per_minute": 2, "burst": 2}), trio.current_time)
    seen: list[tuple[str, str, str]] = []
    limits.on_refused = lambda *a: seen.append(a)
    limits.admit("r", ALICE, front="a2a")()
    limits.admit("r", BOB, front="ws")()
    exc = refused(lambda: limits.admit("r", ANONYMOUS, front="rest"))
    assert (exc.limit, exc.scope, exc.retry_after_s) == ("requests_per_minute", "route", 30)
    assert exc.data == {"retryAfter": 30, "limit": "requests_per_minute", "scope": "route", "route": "r"}
    assert seen == [("r", "route_requests_per_minute", "rest")]
    await trio.sleep(exc.retry_after_s)
    limits.admit("r", ANONYMOUS)()


async def test_route_concurrency_is_held_until_the_turn_ends(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg(route={"max_concurrent_turns": 2}), trio.current_time)
    ends = [limits.admit("r", ALICE), limits.admit("r", BOB)]
    exc = refused(lambda: limits.admit("r", ANONYMOUS))
    assert (exc.limit, exc.scope, exc.retry_after_s) == ("concurrent_turns", "route", 1)
    ends[0]()
    ends[0]()  # released once, however often it is called
    end = limits.admit("r", ANONYMOUS)
    refused(lambda: limits.admit("r", ALICE))
    end()
    ends[1]()


async def test_per_identity_limits_are_per_caller(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(
        lambda: cfg({"per_identity_concurrent_turns": 1, "per_identity_requests_per_minute": 1}), trio.current_time
    )
    alice = limits.admit("r", ALICE)
    assert refused(lambda: limits.admit("r", ALICE)).scope == "identity"  # one at a time
    bob = limits.admit("r", BOB)  # another caller is not held back
    alice()
    exc = refused(lambda: limits.admit("r", ALICE))  # one a minute, burst 1
    assert (exc.limit, exc.scope, exc.retry_after_s) == ("requests_per_minute", "identity", 60)
    bob()
    await trio.sleep(60)
    limits.admit("r", ALICE)()
    # Same subject, another issuer: another caller.
    limits.admit("r", Identity(subject="alice", via="jwt", issuer="https://other.example"))()


async def test_a_caller_refused_leaves_the_route_bucket_as_it_was(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg(route={"requests_per_minute": 2, "burst": 2, "per_identity_requests_per_minute": 1}), trio.current_time)
    limits.admit("r", ALICE)()
    refused(lambda: limits.admit("r", ALICE))  # alice's own bucket is empty: the route's token is given back
    limits.admit("r", BOB)()  # so bob still has the route's second


async def test_callers_are_an_lru_that_keeps_running_ones(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg({"max_identities": 16, "per_identity_requests_per_minute": 1}), trio.current_time)
    running = limits.admit("r", ALICE)
    for i in range(100):
        limits.admit("r", Identity(subject=f"u{i}", via="token"))()
    assert limits.callers <= 16 + 1
    # alice was kept (a turn running): her bucket is still empty.
    assert refused(lambda: limits.admit("r", ALICE)).scope == "identity"
    running()
    # u0 was forgotten: it starts again with a full bucket.
    limits.admit("r", Identity(subject="u0", via="token"))()


async def test_a_reload_applies_at_once(autojump_clock: trio.testing.MockClock) -> None:
    current = [cfg(route={"max_concurrent_turns": 1})]
    limits = TurnLimits(lambda: current[0], trio.current_time)
    end = limits.admit("r", ALICE)
    refused(lambda: limits.admit("r", BOB))
    current[0] = cfg(route={"max_concurrent_turns": 0})  # 0: no limit
    limits.admit("r", BOB)()
    end()
    assert limits.admit("gone", ALICE) is not None  # a route no longer configured: nothing to count


# -- configuration and codes -----------------------------------------------------------------------


def test_route_limits_override_the_defaults_one_by_one() -> None:
    c = cfg({"max_concurrent_turns": 8, "requests_per_minute": 60, "per_identity_concurrent_turns": 2},
            {"max_concurrent_turns": 0, "burst": 5})  # fmt: skip
    lim = effective(c.limits, c.routes["r"].limits)
    assert lim == Limits(max_concurrent_turns=0, requests_per_minute=60, burst=5, per_identity_concurrent_turns=2)
    for bad in ({"burst": 0}, {"max_concurrent_turns": -1}, {"requests_per_minute": "many"}, {"per_identity": 1}):
        with pytest.raises(ConfigError, match=r"\$\.routes\.r\.limits"):
            cfg(route=bad)
    with pytest.raises(ConfigError, match="max_identities"):
        cfg({"max_identities": 1})
    with pytest.raises(ConfigError):
        cfg(route={"max_identities": 100})  # a route has no LRU of its own


def test_rate_limited_codes_by_meaning() -> None:
    exc = RateLimited("over", retry_after_s=7, limit="requests_per_minute", scope="identity", route="r")
    codes = codes_for(exc)
    assert (codes.jsonrpc, codes.http, codes.ws_close) == (-32005, 429, 1013)
    assert codes.a2a == CODES[RateLimited].a2a == -32603  # A2A 1.0 has no such code: ErrorInfo says what it is
    assert msgspec.json.decode(msgspec.json.encode(exc.data)) == {"retryAfter": 7, "limit": "requests_per_minute", "scope": "identity", "route": "r"}
    # Rebuilt from its message alone (forwarded from another instance): a second.
    assert RateLimited("over").retry_after_s == 1


async def test_a_new_caller_is_never_the_one_forgotten(autojump_clock: trio.testing.MockClock) -> None:
    """Every remembered caller has a turn running: the new one is added all the same, and
    counted (it used to be dropped at once, its turns counted nowhere: no limit held it)."""
    limits = TurnLimits(lambda: cfg({"max_identities": 16, "per_identity_concurrent_turns": 1}), trio.current_time)
    held = [limits.admit("r", Identity(subject=f"u{i}", via="token")) for i in range(16)]
    mallory = Identity(subject="mallory", via="token")
    first = limits.admit("r", mallory)
    assert refused(lambda: limits.admit("r", mallory)).scope == "identity"
    assert limits.callers == 17  # the table's bound plus the running turns (module docstring)
    for end in [*held, first]:
        end()
    limits.admit("r", Identity(subject="next", via="token"))()
    assert limits.callers <= 16


async def test_a_refund_gives_back_the_slot_and_the_turns_taken(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg(route={"requests_per_minute": 1, "max_concurrent_turns": 1, "per_identity_requests_per_minute": 1}),
                        trio.current_time)  # fmt: skip
    admission = limits.admit("r", ALICE)
    admission.refund()
    admission.refund()
    admission()  # once, however it is called
    limits.admit("r", ALICE)()  # the route's turn and alice's are hers again
    assert refused(lambda: limits.admit("r", ALICE)).limit == "requests_per_minute"


async def test_a_turn_refused_as_it_begins_takes_no_turn_of_the_minute() -> None:
    """A prompt to a busy session is refused after `[limits]` admitted it: what it took
    goes back, so the caller's next turn elsewhere (the A2A front's side session for a
    busy context) is not refused for a turn that never ran."""
    from bridge.backs import make_back
    from bridge.core.content import TextContent
    from bridge.errors import Busy
    from bridge.session import SessionManager
    from bridge.store.memory import MemoryStore

    route = {"back": {"kind": "demo", "chunk_delay_s": 0.001, "slow_duration_s": 30.0},
             "limits": {"per_identity_requests_per_minute": 1, "per_identity_concurrent_turns": 1}}  # fmt: skip
    config = parse_config({"routes": {"r": route}})
    manager = SessionManager(config, MemoryStore(), lambda name, r: make_back(name, r))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            busy = await manager.create("r")
            slow = await busy.begin_turn([TextContent(text="slow: x")], identity=ALICE)
            with pytest.raises(Busy):
                await busy.begin_turn([TextContent(text="hi")], identity=BOB)
            other = await manager.create("r")
            turn = await other.begin_turn([TextContent(text="hi")], identity=BOB)
            assert (await turn.wait()).stop_reason.value == "end_turn"
            assert busy.cancel()
            assert (await slow.wait()).stop_reason.value == "cancelled"
            nursery.cancel_scope.cancel()


async def test_check_refuses_as_admit_would_and_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    limits = TurnLimits(lambda: cfg(route={"requests_per_minute": 1, "per_identity_concurrent_turns": 1}), trio.current_time)
    limits.check("r", ALICE)
    limits.check("r", ALICE)  # nothing taken: still one turn this minute
    running = limits.admit("r", ALICE)
    assert refused(lambda: limits.check("r", ALICE)).scope == "identity"
    running()
    assert refused(lambda: limits.check("r", BOB)).limit == "requests_per_minute"
