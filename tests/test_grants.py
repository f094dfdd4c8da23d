"""bridge/session/grants.py: what a reload's rules take back, and a faulty grant never
stops the others."""

from __future__ import annotations

import logging

import pytest

from bridge.session.grants import Grants, Refusals


def test_a_refused_grant_is_revoked_once_and_an_allowed_one_is_kept() -> None:
    grants = Grants()
    revoked: list[tuple[str, BaseException]] = []
    refuse = {"config": "new"}
    grants.hold(lambda c: PermissionError("no") if c is refuse else None, lambda r: revoked.append(("a", r)))
    grants.hold(lambda c: None, lambda r: revoked.append(("b", r)))
    assert grants.recheck({"config": "same"}) == 0 and revoked == []
    assert grants.recheck(refuse) == 1
    assert [name for name, _ in revoked] == ["a"] and str(revoked[0][1]) == "no"
    assert grants.recheck(refuse) == 0 and len(grants) == 1  # once: gone after its revoke


def test_a_view_is_rechecked_on_every_reload_and_released_for_good() -> None:
    grants = Grants()
    seen: list[BaseException] = []
    release = grants.hold(lambda c: Refusals([("s1", LookupError(c))]), seen.append, once=False)
    assert grants.recheck("one") == 1 and grants.recheck("two") == 1
    assert [str(r.refused[0][1]) for r in seen if isinstance(r, Refusals)] == ["one", "two"]
    release()
    release()  # idempotent
    assert grants.recheck("three") == 0 and len(grants) == 0


def test_a_revoke_may_release_another_grant_and_it_is_not_revoked_after() -> None:
    grants = Grants()
    calls: list[str] = []
    later: list[object] = []
    grants.hold(lambda c: RuntimeError(), lambda r: (calls.append("first"), later[0]()))  # type: ignore[operator]
    later.append(grants.hold(lambda c: RuntimeError(), lambda r: calls.append("second")))
    assert grants.recheck(None) == 1 and calls == ["first"]


def test_a_grant_that_raises_is_logged_and_dropped_a_view_kept_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    grants = Grants()
    revoked: list[str] = []

    def broken_check(config: object) -> BaseException | None:
        raise ValueError("our bug")

    def broken_revoke(refusal: BaseException) -> None:
        raise KeyError("our other bug")

    grants.hold(broken_check, revoked.append)  # type: ignore[arg-type]
    grants.hold(lambda c: LookupError("x"), broken_revoke, once=False)
    grants.hold(lambda c: LookupError("y"), lambda r: revoked.append(str(r)))
    with caplog.at_level(logging.ERROR, logger="bridge.session"):
        assert grants.recheck(None) == 1
    assert revoked == ["y"]
    assert len(grants) == 1  # the faulty grant dropped; the view kept, for the next reload
    assert sum("a grant's check or revoke failed" in r.message for r in caplog.records) == 2
    with caplog.at_level(logging.ERROR, logger="bridge.session"):
        assert grants.recheck(None) == 0  # its revoke raises again, and is logged again
    assert len(grants) == 1
