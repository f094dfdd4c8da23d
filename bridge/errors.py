"""The one error hierarchy, and the one table from each error to every protocol's code.

    BridgeError
    ├── PeerError            the client's fault: log WARNING, answer, keep serving
    │   ├── ParseError       bytes that are not JSON
    │   ├── InvalidRequest   JSON that is not a valid request
    │   ├── FrameTooLarge    a frame over the configured maximum
    │   ├── MethodNotFound
    │   ├── InvalidParams    carries the `$.path` of the bad field
    │   ├── AuthRequired
    │   ├── Forbidden
    │   ├── NotFound         an unknown session, task or file
    │   ├── Busy             a turn is already running in that session
    │   └── RequestCancelled the peer cancelled its own request
    ├── BackError            the back (the agent we relay to) failed: WARNING, turn fails
    │   ├── BackUnavailable  it could not be reached or started
    │   ├── BackAuthRequired the agent wants the user to authorize first (A2A AUTH_REQUIRED)
    │   └── PromptError      a slash command could not be expanded (its MCP source is down or refused)
    ├── Overloaded           a configured cap is reached (live sessions): WARNING, refuse, keep serving
    │   └── RateLimited      a caller's or a route's turn limits (`[limits]`): carries `retry_after_s`
    ├── ConfigError          the configuration is invalid: exit 78 (EX_CONFIG)
    └── InternalError        our bug: log ERROR with the traceback

Codes are mapped by meaning, never passed through between protocols (-32002 is
"resource not found" in ACP and MCP but "task not cancelable" in A2A).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "AuthRequired",
    "BackAuthRequired",
    "BackError",
    "BackUnavailable",
    "BridgeError",
    "Busy",
    "ConfigError",
    "ConfigProblem",
    "Codes",
    "CODES",
    "Forbidden",
    "FrameTooLarge",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "Overloaded",
    "PromptError",
    "ParseError",
    "PeerError",
    "RateLimited",
    "RequestCancelled",
    "codes_for",
]


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose. `data` goes on the wire."""

    def __init__(self, message: str, *, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class PeerError(BridgeError):
    pass


class ParseError(PeerError):
    pass


class InvalidRequest(PeerError):
    pass


class FrameTooLarge(PeerError):
    pass


class MethodNotFound(PeerError):
    pass


class InvalidParams(PeerError):
    pass


class AuthRequired(PeerError):
    pass


class Forbidden(PeerError):
    pass


class NotFound(PeerError):
    pass


class Busy(PeerError):
    pass


class RequestCancelled(PeerError):
    pass


class BackError(BridgeError):
    pass


class BackUnavailable(BackError):
    pass


class BackAuthRequired(BackError):
    """The agent behind the back needs the user to authorize (A2A AUTH_REQUIRED):
    ACP answers the prompt with auth_required (ACP schema, `ErrorCode`: -32000)."""


class PromptError(BackError):
    """A prompt (slash command) could not be had from its source: the turn fails with
    this message before the back sees anything (bridge/prompts)."""


class Overloaded(BridgeError):
    """The bridge has no room for what was asked (`[daemon] max_live_sessions`, a route's
    `max_live_sessions`, none of its sessions idle): neither the client's fault nor the
    back's; the client may try again later."""


class ConfigProblem(str):
    """One problem of a configuration. It is the `$.path: message` string every caller
    prints (so a plain `str` problem and this one mix freely), with its parts kept apart
    for `check-config --format json`: the path, the message, a hint to fix it ("did you
    mean ...", the allowed values) and the line in the file when known."""

    path: str
    message: str
    hint: str | None
    line: int | None

    def __new__(cls, path: str, message: str, *, hint: str | None = None, line: int | None = None) -> ConfigProblem:
        self = super().__new__(cls, f"{path}: {message}" if path else message)
        self.path, self.message, self.hint, self.line = path, message, hint, line
        return self

    @classmethod
    def of(cls, problem: str) -> ConfigProblem:
        """`problem` as a ConfigProblem: itself, or a plain `$.path: message` string split."""
        if isinstance(problem, ConfigProblem):
            return problem
        path, sep, message = problem.partition(": ")
        if sep and path.startswith("$"):
            return cls(path, message)
        return cls("", problem)

    def located(self, line: int | None) -> ConfigProblem:
        return ConfigProblem(self.path, self.message, hint=self.hint, line=line)

    def __reduce__(self) -> Any:  # pickled (a worker's error) with its parts
        return (_problem, (self.path, self.message, self.hint, self.line))


def _problem(path: str, message: str, hint: str | None, line: int | None) -> ConfigProblem:
    return ConfigProblem(path, message, hint=hint, line=line)


class RateLimited(Overloaded):
    """A turn refused by `[limits]` (bridge/session/limits.py): too many turns running, or
    started in the last minute, for this caller or this route. `retry_after_s` is when
    trying again may work (whole seconds, at least 1: HTTP `Retry-After`, RFC 9110 §10.2.3);
    `data` says which limit, for every protocol's error `data`."""

    # Defaults: a RateLimited rebuilt from its message alone (a command forwarded to another
    # instance, bridge/cluster/base.py `error_of`) says "try again in a second".
    def __init__(self, message: str, *, retry_after_s: int = 1, limit: str = "", scope: str = "", route: str = "") -> None:
        super().__init__(message, data={"retryAfter": retry_after_s, "limit": limit, "scope": scope, "route": route})
        self.retry_after_s = retry_after_s
        self.limit = limit  # "concurrent_turns" | "requests_per_minute"
        self.scope = scope  # "route" | "identity"
        self.route = route


class ConfigError(BridgeError):
    """Carries every problem found, each as `$.path: message` (a `ConfigProblem` where
    there is more to say)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems) or "invalid configuration")
        self.problems = problems


class InternalError(BridgeError):
    pass


class Codes(NamedTuple):
    jsonrpc: int  # ACP and MCP (JSON-RPC 2.0 + their reserved codes)
    a2a: int  # A2A JSON-RPC binding (A2A spec §5.4, Error Code Mappings)
    http: int
    ws_close: int  # RFC 6455 close codes; 4xxx are application-defined


# The table of STYLE.md rule 9. A2A has no "session" or "busy" codes: an unknown
# session is an unknown task (-32001), a busy one an unsupported operation (-32004).
CODES: dict[type[BridgeError], Codes] = {
    ParseError: Codes(-32700, -32700, 400, 1007),
    InvalidRequest: Codes(-32600, -32600, 400, 1008),
    FrameTooLarge: Codes(-32600, -32600, 413, 1009),
    MethodNotFound: Codes(-32601, -32601, 404, 1008),
    InvalidParams: Codes(-32602, -32602, 400, 1007),
    AuthRequired: Codes(-32000, -32600, 401, 4401),
    # ACP's -32000 means "authenticate first", which a refusal is not: the request's
    # params (a path outside the root, a write to a read-only route) are what is refused.
    Forbidden: Codes(-32602, -32600, 403, 4403),
    NotFound: Codes(-32002, -32001, 404, 4404),
    Busy: Codes(-32600, -32004, 409, 4409),
    RequestCancelled: Codes(-32800, -32603, 499, 1000),
    BackUnavailable: Codes(-32603, -32603, 502, 1011),
    BackAuthRequired: Codes(-32000, -32600, 401, 4401),
    PromptError: Codes(-32603, -32603, 502, 1011),
    BackError: Codes(-32603, -32006, 502, 1011),
    # No room: HTTP 503 (RFC 9110 §15.6.4), WebSocket 1013 "Try Again Later" (IANA close
    # code registry), JSON-RPC -32005 "limit exceeded" from the implementation-defined
    # -32000..-32099 range (-32000 is ACP's auth_required), A2A has no such code: internal.
    Overloaded: Codes(-32005, -32603, 503, 1013),
    # Too many requests: HTTP 429 (RFC 6585 §4) with Retry-After; the same "limit
    # exceeded" -32005 in ACP and MCP with `data.retryAfter`; A2A 1.0 defines no such
    # error: internal, with an ErrorInfo reason RATE_LIMIT_EXCEEDED and a RetryInfo
    # detail (google.rpc error model, which A2A 1.0 §5 errors follow).
    RateLimited: Codes(-32005, -32603, 429, 1013),
    ConfigError: Codes(-32603, -32603, 500, 1011),
    InternalError: Codes(-32603, -32603, 500, 1011),
    PeerError: Codes(-32600, -32600, 400, 1008),
    BridgeError: Codes(-32603, -32603, 500, 1011),
}


def codes_for(exc: BaseException) -> Codes:
    """The codes of the nearest class in the table; anything foreign is our bug."""
    for cls in type(exc).__mro__:
        if cls in CODES:
            return CODES[cls]  # type: ignore[index]
    return CODES[InternalError]
