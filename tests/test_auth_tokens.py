"""The issuers' bearer tokens (bridge/fronts/auth.py, bridge/fronts/jwks.py), against a
local test issuer serving its JWK Set and OIDC discovery on 127.0.0.1 (tests/issuer_support.py).

Each kind of bad token is refused, each good one accepted; key rotation is picked up;
a flood of unknown kids costs one JWK Set fetch; garbage in the Authorization header
never raises anything but `AuthRefused` (hypothesis).
"""

from __future__ import annotations

import time
from typing import Any

import jwt
import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.config import AuthConfig, IssuerConfig
from bridge.fronts.auth import AuthRefused, Authenticator, bearer_of
from tests.issuer_support import AUDIENCE, TestIssuer, running_issuer


@pytest.fixture
def issuer():
    with running_issuer() as found:
        yield found


def _auth(issuer: TestIssuer, *, discovery: bool = True, refresh_min_s: float = 30.0, **issuer_cfg: object) -> Authenticator:
    cfg = IssuerConfig(issuer=issuer.url, audience=AUDIENCE, jwks_url=None if discovery else issuer.url + "/jwks.json", **issuer_cfg)  # type: ignore[arg-type]
    return Authenticator(AuthConfig(issuers=[cfg], jwks_refresh_min_s=refresh_min_s))


async def _refused(auth: Authenticator, token: str, why: str) -> None:
    with trio.fail_after(10), pytest.raises(AuthRefused) as caught:
        await auth.verify(token)
    assert why.lower() in caught.value.reason.lower(), caught.value.reason


async def test_a_valid_token_is_an_identity_with_its_claims(issuer: TestIssuer) -> None:
    auth = _auth(issuer)
    with trio.fail_after(10):
        who = await auth.verify(issuer.mint("alice", groups=["ops"], scope="agent:use"))
    assert (who.subject, who.via, who.issuer) == ("alice", "jwt", issuer.url)
    assert who.claims["groups"] == ["ops"] and who.key == f"jwt:{issuer.url}:alice"
    assert issuer.discoveries == 1 and issuer.fetches == 1  # discovery, then the JWK Set
    await auth.verify(issuer.mint("bob"))
    assert issuer.fetches == 1  # the key is cached


async def test_a_jwks_url_skips_discovery_and_es256_works(issuer: TestIssuer) -> None:
    issuer.rotate("ec1", kind="EC")
    auth = _auth(issuer, discovery=False)
    who = await auth.verify(issuer.mint("carol", kid="ec1"))
    assert who.subject == "carol" and issuer.discoveries == 0


async def test_bad_tokens_are_refused(issuer: TestIssuer) -> None:
    auth = _auth(issuer)
    now = int(time.time())
    await _refused(auth, issuer.mint(exp=now - 3600), "expired")
    await _refused(auth, issuer.mint(aud="https://someone-else/"), "audience")
    await _refused(auth, issuer.mint(iss="https://evil.example/"), "issuer")
    await _refused(auth, issuer.mint(nbf=now + 3600), "not yet valid")
    await _refused(auth, issuer.forged_none(), "algorithm 'none'")
    await _refused(auth, issuer.forged_hs256(), "algorithm 'HS256'")
    # A token signed by a key the issuer never published, under a kid it does publish.
    other = TestIssuer()
    other.url = issuer.url
    await _refused(auth, other.mint(kid="k1"), "Signature verification failed")
    await _refused(auth, other.mint(kid="k1", headers={"kid": "nope"}), "does not publish")
    # No exp, no sub: required (RFC 9068 §2.2).
    key = issuer.keys["k1"]
    claims = issuer.claims()
    del claims["exp"]
    await _refused(auth, jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"}), "exp")
    claims = issuer.claims()
    del claims["sub"]
    await _refused(auth, jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"}), "sub")
    # A PS256 token under a key published for RS256 (RFC 7517 §4.4), and an algorithm not configured.
    await _refused(auth, issuer.mint(alg="PS256"), "PS256")
    # Clock skew: a token expired 30 s ago is still good with the default 60 s.
    assert (await auth.verify(issuer.mint(exp=now - 30))).subject == "alice"


async def test_rotation_finds_a_new_kid_and_a_flood_of_unknown_kids_costs_one_fetch(issuer: TestIssuer) -> None:
    auth = _auth(issuer, refresh_min_s=30.0)
    keys = auth.issuers[issuer.url]
    await auth.verify(issuer.mint())
    assert issuer.fetches == 1
    other = TestIssuer()
    other.url = issuer.url
    forged = [other.mint(kid="k1", headers={"kid": f"random-{n}"}) for n in range(200)]

    async def flood() -> None:
        async with trio.open_nursery() as nursery:
            for token in forged:
                nursery.start_soon(_refused, auth, token, "does not publish")

    await flood()  # within the interval of the first fetch: none
    assert issuer.fetches == 1, issuer.fetches
    keys._tried_at = float("-inf")  # as if jwks_refresh_min_s had passed
    await flood()  # 200 unknown kids at once: one fetch, the others wait for it
    assert issuer.fetches == 2, issuer.fetches
    # The issuer rotates: a token with the new kid is refused until the interval has
    # passed, then accepted after one fetch.
    issuer.rotate("k2")
    await _refused(auth, issuer.mint("dave", kid="k2"), "does not publish")
    keys._tried_at = float("-inf")
    who = await auth.verify(issuer.mint("dave", kid="k2"))
    assert who.subject == "dave" and issuer.fetches == 3
    assert (await auth.verify(issuer.mint("erin", kid="k1"))).subject == "erin"  # the old key still serves


async def test_an_unreachable_issuer_refuses_and_does_not_block(issuer: TestIssuer) -> None:
    cfg = IssuerConfig(issuer="http://127.0.0.1:9", audience=AUDIENCE)
    auth = Authenticator(AuthConfig(issuers=[cfg], jwks_timeout_s=2))
    token = jwt.encode({**issuer.claims(), "iss": "http://127.0.0.1:9"}, issuer.keys["k1"], algorithm="RS256", headers={"kid": "k1"})
    await _refused(auth, token, "does not publish")


def test_config_refuses_hmac_and_none_and_plain_http() -> None:
    for algs in (["HS256"], ["none"], []):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"issuer": "https://i.example", "audience": "a", "algorithms": algs}, IssuerConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"issuer": "http://i.example", "audience": "a"}, IssuerConfig)


_TOKEN_CHARS = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=300)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    header=st.one_of(
        st.binary(max_size=300),
        _TOKEN_CHARS.map(lambda t: b"Bearer " + t.encode()),
        st.tuples(_TOKEN_CHARS, _TOKEN_CHARS, _TOKEN_CHARS).map(lambda p: ("Bearer " + ".".join(p)).encode()),
        st.tuples(st.binary(max_size=60), st.binary(max_size=60), st.binary(max_size=40)).map(
            lambda p: b"Bearer " + b".".join(__import__("base64").urlsafe_b64encode(x).rstrip(b"=") for x in p)
        ),
    )
)
def test_garbage_bearer_headers_are_refused_never_raised(header: bytes) -> None:
    """Whatever the header, `identify` answers None (no JWT: the front's static token
    decides) or raises AuthRefused (a 401); nothing else escapes."""
    auth = Authenticator(AuthConfig(issuers=[IssuerConfig(issuer="http://127.0.0.1:9", audience=AUDIENCE)], jwks_timeout_s=0.5))
    # No issuer is reachable: a token that gets as far as the keys is refused there, at
    # most one fetch attempt per interval.
    scope = {"type": "http", "headers": [(b"authorization", header)]}

    async def main() -> None:
        try:
            await auth.identify(scope)
        except AuthRefused:
            pass

    trio.run(main)
    bearer_of(scope)  # total too


@settings(max_examples=200, deadline=None)
@given(value=st.binary(max_size=200), scheme=st.sampled_from([b"Bearer ", b"bearer ", b"Basic ", b"", b"Bearer  "]))
def test_through_the_listener_garbage_is_always_a_401_with_a_challenge(value: bytes, scheme: bytes) -> None:
    """The same through `HttpApp`: whatever Authorization says, the handler never runs and
    the answer is a 401 carrying `WWW-Authenticate: Bearer ... resource_metadata`."""
    from bridge.fronts.http import HttpApp

    cfg = AuthConfig(issuers=[IssuerConfig(issuer="http://127.0.0.1:9", audience=AUDIENCE)], jwks_timeout_s=0.5)
    app = HttpApp(auth=Authenticator(cfg))
    ran: list[bool] = []

    async def handler(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        ran.append(True)

    app.add("GET", "/x", handler)
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [(b"host", b"127.0.0.1"), (b"authorization", scheme + value)],
             "server": ("127.0.0.1", 80)}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    trio.run(app, scope, receive, send)
    assert not ran and sent[0]["status"] == 401
    challenge = dict(sent[0]["headers"])[b"www-authenticate"]
    assert challenge.startswith(b"Bearer resource_metadata=")
