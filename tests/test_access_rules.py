"""`[routes.NAME.access]` as pure rules (bridge/core/access.py): what each action allows,
how a rule reads a claim, and that no claim shape makes a rule raise (hypothesis)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config import parse_config
from bridge.core.access import RouteAccess, Rule, may, owner_of
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import ConfigError

ALICE = Identity(subject="alice", via="jwt", issuer="https://i", claims={"sub": "alice", "scope": "agents:use read"})
BOB = Identity(subject="bob", via="jwt", issuer="https://i", claims={"sub": "bob", "groups": ["ops"], "scope": "agents:use"})
CAROL = Identity(subject="carol", via="jwt", issuer="https://i", claims={"sub": "carol"})


def _access(**lists: object) -> RouteAccess:
    return msgspec.convert(lists, RouteAccess)


def test_without_a_table_everyone_may_everything() -> None:
    for action in ("start", "list", "watch", "use", "answer"):
        assert may(None, CAROL, action, ALICE.key)  # type: ignore[arg-type]


def test_the_owner_may_everything_others_only_what_a_rule_allows() -> None:
    ops = [{"claim": "groups", "contains": "ops"}]
    access = _access(watch=ops, answer=ops)
    assert all(may(access, ALICE, a, ALICE.key) for a in ("list", "watch", "use", "answer"))  # type: ignore[arg-type]
    assert not any(may(access, CAROL, a, ALICE.key) for a in ("list", "watch", "use", "answer"))  # type: ignore[arg-type]
    assert may(access, BOB, "watch", ALICE.key) and may(access, BOB, "answer", ALICE.key)
    assert not may(access, BOB, "use", ALICE.key) and not may(access, BOB, "list", ALICE.key)
    # A session with no recorded owner (stored before owners) stays shared.
    assert may(access, CAROL, "use", None)


def test_start_gates_new_sessions_and_the_owners_own() -> None:
    access = _access(start=[{"claim": "scope", "contains": "agents:use"}])
    assert may(access, ALICE, "start") and may(access, BOB, "start") and not may(access, CAROL, "start")
    assert not may(access, CAROL, "use", CAROL.key)  # its own session, but it may no longer start here
    assert not may(access, ANONYMOUS, "start")


def test_rules_read_claims_and_the_identitys_own_fields() -> None:
    unix = Identity(subject="dev", via="unix", claims={"uid": 1000})
    assert Rule(claim="sub", equals="dev").matches(unix)  # subject stands in for a missing `sub`
    assert Rule(claim="via", equals="unix").matches(unix)
    assert Rule(claim="uid", equals="1000").matches(unix)
    assert Rule(claim="scope", contains="read").matches(ALICE)
    assert not Rule(claim="scope", contains="rea").matches(ALICE)  # whole words only
    assert not Rule(claim="groups", contains="ops").matches(ALICE)
    with pytest.raises(ValueError):
        Rule(claim="sub")
    with pytest.raises(ValueError):
        Rule(claim="sub", equals="a", contains="b")


def test_the_config_reads_and_checks_access_tables() -> None:
    route = {"back": {"kind": "demo"}, "access": {"list": [{"claim": "groups", "contains": "ops"}]}}
    config = parse_config({"routes": {"r": route}})
    assert config.routes["r"].access is not None and config.routes["r"].access.listing[0].contains == "ops"
    for bad in ({"lists": []}, {"list": [{"claim": "g"}]}, {"list": [{"claim": "g", "contains": "x", "regex": "."}]}):
        with pytest.raises(ConfigError):
            parse_config({"routes": {"r": {"back": {"kind": "demo"}, "access": bad}}})


def test_owner_of_reads_only_a_string() -> None:
    assert owner_of({"owner": "jwt:i:a"}) == "jwt:i:a"
    assert owner_of({"owner": 3}) is None and owner_of(None) is None and owner_of({}) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(
    claims=st.dictionaries(st.sampled_from(["sub", "groups", "scope", "iss", "x"]), _json, max_size=5),
    claim=st.sampled_from(["sub", "groups", "scope", "iss", "via", "x", "missing"]),
    value=st.text(max_size=10),
    action=st.sampled_from(["start", "list", "watch", "use", "answer"]),
    owner=st.none() | st.text(max_size=20),
)
def test_no_claim_shape_makes_a_rule_raise(claims: dict[str, object], claim: str, value: str, action: str, owner: str | None) -> None:
    who = Identity(subject="s", via="jwt", issuer="i", claims=claims)
    rules = [{"claim": claim, "equals": value}, {"claim": claim, "contains": value}]
    access = _access(start=rules[:1], list=rules, watch=rules[1:], use=rules, answer=rules)
    assert may(access, who, action, owner) in (True, False)  # type: ignore[arg-type]


_RULES = st.lists(
    st.sampled_from([{"claim": "groups", "contains": "ops"}, {"claim": "via", "equals": "jwt"}, {"claim": "sub", "equals": "me"}]),
    max_size=2,
)
_TABLE = st.none() | st.fixed_dictionaries({}, optional={"start": _RULES, "list": _RULES, "watch": _RULES})


@given(
    tables=st.lists(_TABLE, min_size=3, max_size=3),
    groups=st.lists(st.sampled_from(["ops", "dev"]), max_size=2),
    via=st.sampled_from(["jwt", "token", "unix"]),
    sessions=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "gone"]), st.sampled_from(["me", "other", None, ""])), max_size=8),
)
def test_the_listing_filter_is_the_per_session_rule(
    tables: list[dict[str, object] | None], groups: list[str], via: str, sessions: list[tuple[str, str | None]]
) -> None:
    """What the stores' query shows a caller (`owners.visibility`, bridge/store/listing.py
    `Visible`) is exactly what the rule of each session (`may(..., "list", owner)`) allows."""
    from bridge.fronts import owners
    from bridge.store import SessionRecord

    routes = {name: {"back": {"kind": "demo"}, **({"access": t} if t is not None else {})} for name, t in zip("abc", tables)}
    config = parse_config({"routes": routes})
    me = Identity(subject="me", via=via, issuer="i" if via == "jwt" else "", claims={"groups": groups})  # type: ignore[arg-type]
    keys = {"me": me.key, "other": "jwt:i:other", None: None, "": ""}
    visible = owners.visibility(config, me)
    for route, owner in sessions:
        record = SessionRecord(session_id="s", route=route, created_at=0, updated_at=0, meta={"owner": keys[owner]} if owner is not None else {})
        by_rule = bool(owners.visible(config, [record], me))
        by_query = True if visible is None else visible.shows(route, owner_of(record.meta))
        assert by_query == by_rule, (route, owner, tables)


def test_a_boolean_claim_equals_its_json_spelling() -> None:
    verified = Identity(subject="v", via="jwt", issuer="https://i", claims={"email_verified": True, "n": 0})
    assert Rule(claim="email_verified", equals="true").matches(verified)
    assert not Rule(claim="email_verified", equals="True").matches(verified)
    assert Rule(claim="n", equals="0").matches(verified) and not Rule(claim="n", equals="false").matches(verified)


def test_issuers_whose_callers_keys_could_collide_are_refused() -> None:
    """`jwt:https://idp:8443:bob` is bob of https://idp:8443, and also the subject
    "8443:bob" of https://idp: two such issuers cannot both be trusted."""
    def issuer(url: str) -> dict[str, str]:
        return {"issuer": url, "audience": "https://bridge"}

    routes = {"r": {"back": {"kind": "demo"}}}
    with pytest.raises(ConfigError, match="could collide"):
        parse_config({"routes": routes, "auth": {"issuers": [issuer("https://idp"), issuer("https://idp:8443")]}})
    parse_config({"routes": routes, "auth": {"issuers": [issuer("https://idp/a"), issuer("https://idp/ab")]}})  # distinct


def test_a_stream_is_refused_only_when_every_action_that_could_open_it_is() -> None:
    """`owners.refusal` (what a reload rechecks, bridge/session/grants.py): allowed while
    any of the actions is; refused with the first action's refusal, as a request would be."""
    from bridge.errors import Forbidden, NotFound
    from bridge.fronts import owners
    from bridge.store import SessionRecord

    ops = [{"claim": "groups", "contains": "ops"}]
    config = parse_config({"routes": {"team": {"back": {"kind": "demo"}, "access": {"use": ops, "list": ops}}}})
    record = SessionRecord(session_id="s1", route="team", created_at=0, updated_at=0, meta={"owner": "jwt:i:alice"})
    bob = Identity(subject="bob", via="jwt", issuer="i", claims={"groups": ["ops"]})
    carol = Identity(subject="carol", via="jwt", issuer="i", claims={})
    alice = Identity(subject="alice", via="jwt", issuer="i", claims={})
    assert isinstance(owners.refusal(config, record, bob, "watch"), NotFound)  # listed but not watched: as a request says
    assert isinstance(owners.refusal(config, record, bob, "answer"), Forbidden)
    assert owners.refusal(config, record, bob, "watch", "use") is None
    assert isinstance(owners.refusal(config, record, carol, "watch", "use", "answer"), NotFound)
    assert owners.refusal(config, record, alice, "watch") is None  # the owner
    assert owners.refusal(config, record, carol) is None  # no action: nothing to refuse
