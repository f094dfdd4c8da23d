"""The chat server of one chat back: its URLs, token, REST calls and error wording.

Shared by the back, its connections (`bridge.backs.chat.link`) and its turns
(`bridge.backs.chat.turn`). `ChatServer` holds the route's configuration, its token
(read at each use, never shown) and one pooled client
(`bridge.transport.http.open_client`) for the REST half (Blade `api/rest.md`):

- `POST {rest_url}/api/sessions {intent, model?, **session_params}` → `{session_id}`:
  the remote session, made at a bridge session's first prompt and stored as its
  back ref;
- `GET {rest_url}/api/sessions/{id}/messages`: whether a stored remote session still
  exists, and (from an agent-bridge peer's `X-Chat-Sequence`) where its stream stands.

Errors say which route, which server and what failed, never a secret (DESIGN.md
complaint 4).
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httpx
import msgspec
import trio

from bridge.backs.secrets import Secret, read_token
from bridge.codecs import safejson
from bridge.codecs.numbers import small_int
from bridge.errors import BackError, BackUnavailable
from bridge.transport.oauth import OAuthClient
from bridge.transport.http import open_client, tls_context

if TYPE_CHECKING:
    from bridge.backs.chat.config import ChatBackConfig as ChatConfig
    from bridge.config import Route

__all__ = ["ChatServer", "run_options", "where"]

log = logging.getLogger("bridge.backs.chat.back")


def where(url: str) -> str:
    """A URL fit for an error message: no query (it may carry a key), no user info."""
    u = urlsplit(url)
    return f"{u.scheme}://{u.hostname or ''}{':' + str(u.port) if u.port else ''}{u.path}"


# `TurnRecord.meta["chat_run"]` of the running turn: what our `/ws` front's `chat:send`
# asked for (headless, output_schema), set as the turn starts, before it reaches the
# back (bridge/fronts/chat/runs.py, `RUN_META_KEY`).
_RUN_KEY = "chat_run"


def run_options(host: Any, turn_id: str) -> tuple[bool, dict[str, Any] | None]:
    """(headless, output_schema) a front asked for this turn (Blade `api/chat-flow.md`, headless runs), to pass through."""
    turn = getattr(host, "turn", None)
    record = getattr(turn, "record", None) if getattr(turn, "turn_id", None) == turn_id else None
    meta = getattr(record, "meta", None)
    run = meta.get(_RUN_KEY) if isinstance(meta, dict) else None
    if not isinstance(run, dict):
        return False, None
    schema = run.get("output_schema")
    return bool(run.get("headless")), schema if isinstance(schema, dict) else None


class _Created(msgspec.Struct, gc=False):
    session_id: str


class _Detail(msgspec.Struct, gc=False):
    detail: Any = None
    message: Any = None


_created = safejson.Decoder(_Created)
_detail = safejson.Decoder(_Detail)


class ChatServer:
    """The chat server a route's back talks to (see the module docstring)."""

    def __init__(self, name: str, route: Route) -> None:
        self.name = name
        self.route = route
        self.cfg: ChatConfig = route.back  # type: ignore[assignment]
        u = urlsplit(self.cfg.url)
        secure = u.scheme in ("wss", "https")
        # The WebSocket URL (http(s):// as Socket.IO users write it means ws(s)://).
        self.ws_url = ("wss" if secure else "ws") + self.cfg.url[len(u.scheme) :]
        self.rest_url = (self.cfg.rest_url or f"{'https' if secure else 'http'}://{u.netloc}").rstrip("/")
        self._client: httpx.AsyncClient | None = None
        self._ssl: ssl.SSLContext | None = None
        self.oauth = OAuthClient(route.oauth, name=f"route {name}") if route.oauth is not None else None

    # -- plumbing ---------------------------------------------------------------------------
    def error(self, what: str, *, unavailable: bool = False) -> BackError:
        """The error to raise for `what` (BackUnavailable when trying again may help)."""
        cls = BackUnavailable if unavailable else BackError
        return cls(f"route {self.name}: {what}")

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            try:
                self._ssl = tls_context(self.cfg.ca_file) if self.cfg.ca_file else ssl.create_default_context()
            except OSError as exc:
                raise self.error(f"cannot read ca_file {self.cfg.ca_file}: {exc.strerror or exc}") from exc
        return self._ssl

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            verify: ssl.SSLContext | bool = self.ssl_context() if self.rest_url.startswith("https:") else True
            self._client = open_client(connect_timeout_s=self.cfg.connect_timeout_s, verify=verify)
        return self._client

    async def token(self) -> Secret | None:
        """The token, read now (rotation needs no restart), or the OAuth access token
        (`[routes.NAME.oauth]`, bridge/transport/oauth.py); never in a message."""
        if self.oauth is not None:
            return Secret(await self.oauth.token())
        return read_token(self.cfg.token_env, self.cfg.token_file, self.error)

    def unauthorized(self, token: Secret | None) -> bool:
        """The server refused `token` (HTTP 401, a refused Socket.IO CONNECT): forget an
        OAuth token so the next `token()` is new; True if trying once more may help."""
        if self.oauth is None or token is None:
            return False
        self.oauth.invalidate(token.reveal())
        return True

    def auth_hint(self) -> str:
        if self.oauth is not None:
            return f"the OAuth token from {self.oauth.where} was refused, also after renewing it"
        if self.cfg.token_env:
            return f"check the token in ${self.cfg.token_env}"
        if self.cfg.token_file:
            return f"check the token in {self.cfg.token_file}"
        return "no token is configured: set token_env or token_file"

    def remote_options(self, options: dict[str, str]) -> dict[str, str]:
        """The session's route options the chat server understands (Blade `api/chat-flow.md`, `chat:send`): model and
        mode, found by their category."""
        return {o.category: options[o.id] for o in self.route.options if o.category in ("model", "mode") and o.id in options}

    # -- REST ---------------------------------------------------------------------------------
    async def _call(self, method: str, path: str, *, json: Any = None) -> httpx.Response:
        url = self.rest_url + path
        try:
            with trio.fail_after(self.cfg.request_timeout_s):
                for _ in range(2):  # a 401 to an OAuth token: once more with a new one
                    token = await self.token()
                    auth = {"Authorization": f"Bearer {token.reveal()}"} if token is not None else {}
                    resp = await self.client.request(method, url, json=json, headers={"Accept": "application/json", **auth})
                    if resp.status_code != 401 or not self.unauthorized(token):
                        break
                return resp
        except trio.TooSlowError:
            raise self.error(
                f"the chat server at {where(url)} did not answer {method} within request_timeout_s "
                f"({self.cfg.request_timeout_s:g} s)",
                unavailable=True,
            ) from None
        except httpx.TransportError as exc:
            raise self.error(f"cannot reach the chat server at {where(url)}: {exc or type(exc).__name__}", unavailable=True) from exc

    def _http_error(self, method: str, resp: httpx.Response) -> BackError:
        phrase = f"{resp.status_code} {httpx.codes.get_reason_phrase(resp.status_code)}".strip()
        try:
            body = _detail.decode(resp.content)
            detail = body.detail or body.message
        except (msgspec.DecodeError, msgspec.ValidationError):
            detail = None
        more = f": {detail}" if detail else ""
        url = where(str(resp.request.url))
        if resp.status_code in (401, 403):
            return self.error(f"the chat server at {url} answered {method} with {phrase} ({self.auth_hint()}){more}")
        return self.error(f"the chat server at {url} answered {method} with {phrase}{more}", unavailable=resp.status_code >= 500)

    async def create_session(self, intent: str, options: dict[str, str]) -> str:
        """`POST /api/sessions` (Blade `api/rest.md`): the remote session's id."""
        body: dict[str, Any] = {"intent": intent}
        if "model" in options:
            body["model"] = options["model"]
        body.update(self.cfg.session_params)
        resp = await self._call("POST", "/api/sessions", json=body)
        if resp.status_code >= 300:
            raise self._http_error("POST /api/sessions", resp)
        try:
            return _created.decode(resp.content).session_id
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.error(f"the chat server's answer to POST /api/sessions holds no session_id: {exc}") from exc

    async def find_session(self, session_id: str) -> tuple[bool, int | None]:
        """Whether the remote session still exists (`GET .../messages`, Blade `api/rest.md`), and the
        sequence to resume after when the server says (`X-Chat-Sequence`)."""
        resp = await self._call("GET", f"/api/sessions/{quote(session_id, safe='')}/messages")
        if resp.status_code == 404:
            return False, None
        if resp.status_code >= 300:
            raise self._http_error("GET /api/sessions/{id}/messages", resp)
        raw = resp.headers.get("x-chat-sequence", "")
        return True, small_int(raw)  # a header: "²".isdigit() too, and int() refuses it

    async def aclose(self) -> None:
        if self.oauth is not None:
            await self.oauth.aclose()
        if self._client is not None:
            await self._client.aclose()
