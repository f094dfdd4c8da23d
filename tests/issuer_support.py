"""A local OAuth/OIDC test issuer: key pairs made here, its JWK Set and OpenID Connect
discovery document served on 127.0.0.1 by a small stdlib HTTP server (its own thread, so
the daemon under test fetches from it while the test's loop waits), tokens minted with
chosen claims, expiries, keys and algorithms.

`TestIssuer.rotate()` publishes a new key (a new `kid`); `fetches` counts JWK Set GETs,
so a test can prove a flood of unknown kids does not become a flood of fetches.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

__all__ = ["AUDIENCE", "TestIssuer", "issuer_toml", "running_issuer"]

AUDIENCE = "https://bridge.test/"


class TestIssuer:
    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.url = ""  # set once serving: http://127.0.0.1:PORT
        self.keys: dict[str, Any] = {}  # kid -> private key
        self.published: list[str] = []
        self.fetches = 0
        self.discoveries = 0
        self.authorized: list[dict[str, str]] = []  # /authorize queries
        self.token_requests: list[dict[str, str]] = []  # /token forms
        self._lock = threading.Lock()
        self.rotate("k1")

    # -- keys ---------------------------------------------------------------------------
    def rotate(self, kid: str, *, kind: str = "RSA") -> str:
        """Make a new key pair and publish it (old keys stay published)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "RSA" else ec.generate_private_key(ec.SECP256R1())
        with self._lock:
            self.keys[kid] = key
            self.published.append(kid)
        return kid

    def jwks(self) -> dict[str, Any]:
        out = []
        with self._lock:
            for kid in self.published:
                key = self.keys[kid]
                alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
                algo = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
                jwk = json.loads(algo.to_jwk(key.public_key()))
                out.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": out}

    def public_pem(self, kid: str = "k1") -> bytes:
        return self.keys[kid].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    # -- tokens -------------------------------------------------------------------------
    def claims(self, sub: str = "alice", **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.url, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300, **extra}

    def mint(self, sub: str = "alice", *, kid: str = "k1", alg: str | None = None, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(self.claims(sub, **claims), key, algorithm=alg, headers={"kid": kid, **(headers or {})})

    def forged_none(self, sub: str = "mallory") -> str:
        """`alg: none` (RFC 7519 §6.1): no signature at all."""
        head = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "k1"}).encode())
        return f"{head}.{_b64(json.dumps(self.claims(sub)).encode())}."

    def forged_hs256(self, sub: str = "mallory") -> str:
        """HS256 with the issuer's public key (PEM) as the HMAC secret: the classic alg confusion."""
        import hashlib
        import hmac

        head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
        body = _b64(json.dumps(self.claims(sub)).encode())
        sig = hmac.new(self.public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{_b64(sig)}"

    # -- serving --------------------------------------------------------------------------
    def handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/.well-known/openid-configuration":
                    with issuer._lock:
                        issuer.discoveries += 1
                    doc: Any = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks.json",
                                "authorization_endpoint": issuer.url + "/authorize", "token_endpoint": issuer.url + "/token",
                                "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"]}  # fmt: skip
                elif self.path == "/.well-known/oauth-authorization-server":  # RFC 8414
                    doc = {"issuer": issuer.url, "authorization_endpoint": issuer.url + "/authorize",
                           "token_endpoint": issuer.url + "/token", "registration_endpoint": issuer.url + "/register",
                           "response_types_supported": ["code"], "grant_types_supported": ["authorization_code"],
                           "code_challenge_methods_supported": ["S256"]}  # fmt: skip
                elif self.path.startswith("/authorize?"):
                    # Signs the user in at once: back to the client's redirect_uri with a code.
                    from urllib.parse import parse_qs, urlencode

                    q = {k: v[0] for k, v in parse_qs(self.path.split("?", 1)[1]).items()}
                    issuer.authorized.append(q)
                    self.send_response(302)
                    self.send_header("location", q["redirect_uri"] + "?" + urlencode({"code": "code-1", "state": q["state"]}))
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                elif self.path == "/jwks.json":
                    with issuer._lock:
                        issuer.fetches += 1
                    doc = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - RFC 7591 registration, RFC 6749 token
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length).decode()
                if self.path == "/register":
                    doc: Any = {**json.loads(raw), "client_id": "client-1"}
                    status = 201
                elif self.path == "/token":
                    from urllib.parse import parse_qs

                    form = {k: v[0] for k, v in parse_qs(raw).items()}
                    issuer.token_requests.append(form)
                    doc = {"access_token": issuer.mint("mcp-user"), "token_type": "Bearer", "expires_in": 300}
                    status = 200
                else:
                    self.send_error(404)
                    return
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@contextlib.contextmanager
def running_issuer() -> Iterator[TestIssuer]:
    issuer = TestIssuer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), issuer.handler())
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()


def issuer_toml(issuer: TestIssuer, *, discovery: bool = True, refresh_min_s: float = 30) -> str:
    """`[auth]` and one `[[auth.issuers]]` for `issuer` (its JWKS from discovery or named)."""
    lines = ["[auth]", f"jwks_refresh_min_s = {refresh_min_s}", "", "[[auth.issuers]]",
             f'issuer = "{issuer.url}"', f'audience = "{AUDIENCE}"']  # fmt: skip
    if not discovery:
        lines.append(f'jwks_url = "{issuer.url}/jwks.json"')
    return "\n".join(lines) + "\n"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
