"""One browser-safety policy for every HTTP front (A2A, REST, /ws, /mcp, /healthz, ...).

`HttpApp` runs `BrowserPolicy.check` on every request and WebSocket upgrade before any
handler, so no front can forget it and no two fronts disagree. Three rules, the same
for routes with and without tokens (README: "Security and limits"):

- Host (DNS rebinding): on a loopback connection the `Host` must name a loopback
  address or one of `[server] allowed_hosts`; elsewhere it is checked only when
  `allowed_hosts` is set. "Loopback" is decided from the connection's own local
  address (`scope["server"]`, the accepted socket's), so a socket passed by systemd
  is judged by what it is, and a wildcard listener reached through 127.0.0.1 (where a
  rebound name lands) is held to the loopback rule too. Refused with 421
  (RFC 9110 §15.5.20: the request was not meant for this server).
- Origin (cross-site requests, WebSocket hijacking): browsers send `Origin` on every
  cross-site request and every WebSocket upgrade (RFC 6454 §7, Fetch §3.1); when
  present it must be a loopback origin, in `[server] allowed_origins`, or in the
  front's own list (`[ws]`, `[mcp] allowed_origins`). "*" allows any. Refused with 403.
- Content-Type (the CORS "simple request", Fetch §3.2.3): a page may POST `text/plain`
  or form data to any site without a preflight. A POST, PUT, PATCH or DELETE that
  carries a body must say JSON (`application/json`, or A2A's `application/a2a+json`,
  A2A 1.0 §3.2.1). One without a body needs none (a2a-sdk's `:subscribe` sends
  neither): a browser sends `Origin` on every such request (Fetch §3.1,
  "append a request `Origin` header"), so the Origin rule already covers it; and a
  cross-site PUT, PATCH or DELETE is always preflighted, which we never approve for
  an origin we were not told of. Refused with 415.

Pure: no I/O, so it is tested case by case without a server.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from bridge.config import ServerConfig

__all__ = ["JSON_TYPES", "BrowserPolicy", "Refusal", "is_loopback_host", "normalize_origins", "origin_host"]

Refusal = tuple[int, str]

JSON_TYPES = frozenset({"application/json", "application/a2a+json"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


_LOOPBACK_SEEN: dict[str, bool] = {}  # Host values are few in practice; bounded below


def is_loopback_host(host: str) -> bool:
    """`host` (no port; IPv6 in brackets or not) names this machine's loopback.

    Asked on every request: answers are remembered (parsing an address costs more than
    the rest of the policy), in a table emptied when it reaches 1024 names, so a client
    sending a new Host each time costs only the parse."""
    known = _LOOPBACK_SEEN.get(host)
    if known is None:
        if len(_LOOPBACK_SEEN) >= 1024:
            _LOOPBACK_SEEN.clear()
        known = _LOOPBACK_SEEN[host] = _is_loopback(host)
    return known


def _is_loopback(host: str) -> bool:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761 §6.3
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    # A dual-stack listener ("[::]") sees an IPv4 peer or local address as ::ffff:a.b.c.d,
    # which Python 3.11 does not call loopback even for 127.0.0.1.
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _split_host(value: str) -> str:
    """The host part of a `Host` header value ("h", "h:port", "[v6]:port")."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def origin_host(origin: str) -> str | None:
    """The host of a serialized origin ("scheme://host[:port]"), None if it is not one."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or "/" in rest.rstrip("/"):
        return None
    return _split_host(rest.rstrip("/"))


def _host_matches(host: str, patterns: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in patterns:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


class BrowserPolicy:
    __slots__ = ("_hosts", "_origins", "_any_origin")

    def __init__(self, server: ServerConfig) -> None:
        self._hosts = tuple(h.lower() for h in server.allowed_hosts)
        self._origins = frozenset(o.rstrip("/").lower() for o in server.allowed_origins)
        self._any_origin = "*" in self._origins

    def __repr__(self) -> str:
        return f"BrowserPolicy(hosts={list(self._hosts)}, origins={sorted(self._origins)})"

    # -- the three rules --------------------------------------------------------------
    def host_allowed(self, host: str | None, *, loopback_listener: bool) -> bool:
        if not loopback_listener and not self._hosts:
            return True
        if host is None:
            return True  # HTTP/1.0 without Host: not a browser, which always sends one
        name = _split_host(host)
        return is_loopback_host(name) or _host_matches(name.strip("[]"), (h.strip("[]") for h in self._hosts))

    def origin_listed(self, origin: str, extra: frozenset[str] = frozenset()) -> bool:
        """Named by the operator (not merely loopback): such an origin also gets CORS headers."""
        origin = origin.rstrip("/").lower()
        return self._any_origin or "*" in extra or origin in self._origins or origin in extra

    def origin_allowed(self, origin: str | None, extra: frozenset[str] = frozenset()) -> bool:
        if origin is None:
            return True  # not from a browser page; tokens still apply
        if self.origin_listed(origin, extra):
            return True
        host = origin_host(origin)  # "null" (sandboxed frames, file:) has none
        return host is not None and is_loopback_host(host)

    @staticmethod
    def content_type_ok(method: str, content_type: str | None, *, has_body: bool) -> bool:
        if method not in _BODY_METHODS or not has_body:
            return True
        if content_type is None:
            return False
        return content_type.split(";", 1)[0].strip().lower() in JSON_TYPES

    # -- one request ------------------------------------------------------------------
    def check(self, scope: dict[str, Any], extra_origins: frozenset[str] = frozenset()) -> Refusal | None:
        """None if the request may reach its handler, else (HTTP status, detail)."""
        server = scope.get("server")
        loopback = bool(server) and isinstance(server[0], str) and is_loopback_host(server[0])
        host = _header(scope, b"host") or _header(scope, b":authority")
        if not self.host_allowed(host, loopback_listener=loopback):
            return 421, (f"Host {host!r} is not this server: a loopback listener answers only to loopback "
                         "names (DNS rebinding); add the name to [server] allowed_hosts")  # fmt: skip
        origin = _header(scope, b"origin")
        if not self.origin_allowed(origin, extra_origins):
            return 403, f"Origin {origin!r} is not allowed; add it to [server] allowed_origins"
        if scope["type"] == "http":
            method = scope["method"]
            ctype = _header(scope, b"content-type")
            length = _header(scope, b"content-length")
            if length is not None:
                has_body = length.strip() not in ("", "0")
            else:  # HTTP/1.1 says a body by chunked framing; HTTP/2 may say nothing (RFC 9113 §8.1.1)
                has_body = _header(scope, b"transfer-encoding") is not None or scope.get("http_version") == "2"
            if not self.content_type_ok(method, ctype, has_body=has_body):
                return 415, (f"{method} needs Content-Type: application/json (got {ctype!r}); "
                             "a request a web page could send cross-site is refused")  # fmt: skip
        return None


def normalize_origins(origins: Iterable[str]) -> frozenset[str]:
    """A front's own allow-list, in the form `BrowserPolicy.check` compares."""
    return frozenset(o.rstrip("/").lower() for o in origins)
