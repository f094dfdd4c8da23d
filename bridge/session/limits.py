"""Turn limits: how many turns a route, and each caller on it, may run at once and start per minute.

`TurnLimits.admit` is called as a turn begins (`Session.begin_turn`, so every front
is limited the same way, before the turn exists): it checks the route's running turns
against `max_concurrent_turns` and the caller's against `per_identity_concurrent_turns`,
then takes one turn from the route's token bucket (`requests_per_minute`, holding
`burst`) and one from the caller's. A turn over any limit is refused with
`RateLimited`, which says which limit and when to try again (`retry_after_s`: for a
bucket, when it holds a turn again; for concurrency, a second, since nobody knows when
a running turn ends); each front answers it its protocol's way (HTTP 429 and
`Retry-After`, JSON-RPC -32005 with `data.retryAfter`, ...). An admitted turn holds
its slots until it ends (`Turn.when_done`); one refused after all as it begins (the
session busy, an unknown /command) gives back the turns it took from the buckets too,
since nothing ran (`Admission.refund`).

A caller is its `Identity.key` (bridge/core/identity.py): every anonymous request is one
caller. Callers are kept per route in an LRU of at most `[limits] max_identities`; one
with a turn running is never forgotten, so the table holds at most that many plus the
running turns (themselves bounded by the live sessions). Limits are read from the
configuration at every admission, so a reload applies at once; counts live in this
process (several instances each count the turns they run).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

from bridge.config import Config, Limits
from bridge.core.identity import Identity
from bridge.errors import RateLimited

__all__ = ["Admission", "Limit", "TokenBucket", "TurnLimits", "effective"]


class TokenBucket:
    """`capacity` turns, refilled at `per_minute` / 60 a second; time is given, not read
    (trio's clock in the daemon, any number in tests)."""

    __slots__ = ("capacity", "rate", "stamp", "tokens")

    def __init__(self, per_minute: float, capacity: int, now: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(capacity)
        self.tokens = float(capacity)
        self.stamp = now

    def configure(self, per_minute: float, capacity: int) -> None:
        """New settings (a reload); what it holds is kept, up to the new capacity."""
        self.rate, self.capacity = per_minute / 60.0, float(capacity)
        self.tokens = min(self.tokens, self.capacity)

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)

    def take(self, now: float) -> float:
        """Take one turn: 0.0 if there was one, else the seconds until there is."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate if self.rate > 0 else math.inf

    def give_back(self) -> None:
        """Undo a `take` (a later check refused the turn)."""
        self.tokens = min(self.capacity, self.tokens + 1.0)


class Limit:
    """One route's, or one caller's, running turns and bucket."""

    __slots__ = ("bucket", "running")

    def __init__(self) -> None:
        self.running = 0
        self.bucket: TokenBucket | None = None

    def take(self, per_minute: float, burst: int, now: float) -> float:
        if not per_minute:
            self.bucket = None
            return 0.0
        if self.bucket is None:
            self.bucket = TokenBucket(per_minute, burst, now)
        elif self.bucket.rate != per_minute / 60.0 or self.bucket.capacity != burst:
            self.bucket.configure(per_minute, burst)
        return self.bucket.take(now)


class Admission:
    """An admitted turn's hold on its route's and its caller's counts: called once, as the
    turn ends (later calls do nothing); `refund` instead when no turn began after all."""

    __slots__ = ("_buckets", "_held", "_limits")

    def __init__(self, limits: tuple[Limit, ...], buckets: tuple[TokenBucket, ...]) -> None:
        self._limits = limits
        self._buckets = buckets  # those it took a turn from
        self._held = True
        for limit in limits:
            limit.running += 1

    def __call__(self) -> None:
        if self._held:
            self._held = False
            for limit in self._limits:
                limit.running -= 1

    def refund(self) -> None:
        """Release, and give back the turns taken from the buckets (nothing started)."""
        if self._held:
            self()
            for bucket in self._buckets:
                bucket.give_back()


def effective(default: Limits, route: Limits) -> Limits:
    """The route's limits: each one it sets, else `[limits]`'s."""
    fields = Limits.__struct_fields__
    return Limits(**{f: getattr(route, f) if getattr(route, f) is not None else getattr(default, f) for f in fields})


def _burst(burst: int | None, per_minute: float) -> int:
    return burst if burst is not None else max(1, math.ceil(per_minute))


def _after(seconds: float) -> int:
    """Whole seconds, at least 1 (HTTP `Retry-After` is an integer, RFC 9110 §10.2.3)."""
    return max(1, math.ceil(seconds)) if math.isfinite(seconds) else 60


class TurnLimits:
    """The limits of every route of one `SessionManager` (see the module docstring)."""

    def __init__(self, config: Callable[[], Config], clock: Callable[[], float]) -> None:
        self._config = config
        self._clock = clock
        self._routes: dict[str, Limit] = {}
        self._callers: OrderedDict[tuple[str, str], Limit] = OrderedDict()
        # Told of every refusal (route, reason, front): the metrics (bridge/metrics.py).
        self.on_refused: Callable[[str, str, str], None] | None = None

    @property
    def callers(self) -> int:
        """Callers remembered now (a gauge)."""
        return len(self._callers)

    def admit(self, route: str, identity: Identity, *, front: str = "") -> Admission:
        """Count one more turn of `identity` on `route`, or raise `RateLimited`. Returns
        what to call once, when the turn ends (or to `refund` if it never begins)."""
        config = self._config()
        spec = config.routes.get(route)
        if spec is None:  # a route being removed: no limits to apply
            return Admission((), ())
        lim = effective(config.limits, spec.limits)
        now = self._clock()
        whole = self._routes.get(route)
        if whole is None:
            whole = self._routes[route] = Limit()
        key = (route, identity.key)
        caller = self._callers.get(key)
        if caller is None:
            # Room made first: the caller just added is never the one forgotten (a caller
            # counted in a Limit no longer in the table would escape its limits).
            self._forget(config.limits.max_identities - 1)
            caller = self._callers[key] = Limit()
        else:
            self._callers.move_to_end(key)
        if lim.max_concurrent_turns and whole.running >= lim.max_concurrent_turns:
            self._refuse(route, "concurrent_turns", "route", front, 1,
                         f"route {route} runs {whole.running} turns, its limit (max_concurrent_turns); try again later")  # fmt: skip
        if lim.per_identity_concurrent_turns and caller.running >= lim.per_identity_concurrent_turns:
            self._refuse(route, "concurrent_turns", "identity", front, 1,
                         f"you run {caller.running} turns on route {route}, your limit (per_identity_concurrent_turns); "
                         "wait for one to end")  # fmt: skip
        rpm = lim.requests_per_minute or 0.0
        wait = whole.take(rpm, _burst(lim.burst, rpm), now)
        if wait:
            self._refuse(route, "requests_per_minute", "route", front, _after(wait),
                         f"route {route} started its {rpm:g} turns a minute (requests_per_minute); try again in {_after(wait)} s")  # fmt: skip
        per = lim.per_identity_requests_per_minute or 0.0
        wait = caller.take(per, _burst(lim.per_identity_burst, per), now)
        if wait:
            if whole.bucket is not None:
                whole.bucket.give_back()
            self._refuse(route, "requests_per_minute", "identity", front, _after(wait),
                         f"you started your {per:g} turns a minute on route {route} (per_identity_requests_per_minute); "
                         f"try again in {_after(wait)} s")  # fmt: skip
        return Admission((whole, caller), tuple(b for b in (whole.bucket, caller.bucket) if b is not None))

    def check(self, route: str, identity: Identity, *, front: str = "") -> None:
        """Raise `RateLimited` as `admit` would now, taking nothing: what a front does for
        a turn before it begins (the chat front's mode and model) is not done for one refused."""
        self.admit(route, identity, front=front).refund()

    def _refuse(self, route: str, limit: str, scope: str, front: str, after: int, message: str) -> None:
        if self.on_refused is not None:
            self.on_refused(route, f"{scope}_{limit}", front or "other")
        raise RateLimited(message, retry_after_s=after, limit=limit, scope=scope, route=route)

    def _forget(self, most: int) -> None:
        """Drop the least recently seen callers with no turn running, down to `most`."""
        excess = len(self._callers) - most
        if excess <= 0:
            return
        drop: list[tuple[str, str]] = []
        for key, caller in self._callers.items():  # oldest first; stops once enough are found
            if caller.running == 0:
                drop.append(key)
                if len(drop) >= excess:
                    break
        for key in drop:
            del self._callers[key]

    def forget_route(self, route: str) -> None:
        """A route removed on reload: its counts go (running turns release into nothing)."""
        self._routes.pop(route, None)
