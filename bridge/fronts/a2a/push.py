"""A2A push notifications (A2A 1.0 push notification operations and
`TaskPushNotificationConfig`, docs/specification.md): webhooks per task, every state
change POSTed, at least once.

Configs are kept with their task, in its row (bridge/fronts/a2a/state.py `A2ATask.push`,
written at once when they change), so they outlive a restart. Each change of the task's state (working,
input-required, completed, ...; not every progress message) is POSTed to each of
its webhooks: for a config made in 1.0, the StreamResponse `{"statusUpdate": ...}`
with `Content-Type: application/a2a+json`; for one made in 0.3, the Task (what a
0.3 webhook expects). `authentication` becomes `Authorization: <scheme>
<credentials>`, `token` the `X-A2A-Notification-Token` header (as a2a-sdk sends it).

Delivery: one queue per webhook, bounded by `[a2a] push_queue_max` (the oldest is
dropped, with a warning), drained in order by one worker in the daemon's nursery;
a failed POST (connection error, timeout, 408/425/429, 5xx) is retried after
`push_backoff_s`, doubled each time up to `push_max_backoff_s`, `push_max_attempts`
times in all; another 4xx is the webhook's final word. At least once: a
notification counts as delivered only on a 2xx, so a retry may repeat one that
arrived. When the daemon stops, what is queued (the final CANCELED of the turns the
stop cancelled among it) is delivered within `[server] graceful_timeout_s` before
the daemon exits (`finish`); what is still queued then is lost, with a warning.

Who: a config keeps the identity of the caller who set it (as its credential said then),
and each change is POSTed only while the route's rules, as they are now (a reload may
have changed them), let that caller watch or use the task; otherwise it is skipped,
with one warning. A config made before creators were kept is not checked.

Where notifications may go: only to hosts in `[a2a] push_allowed_hosts`, checked
when a config is made and again before each POST, with redirects not followed,
so the daemon cannot be made to call arbitrary hosts (SSRF). URLs with user
info are refused (a secret in a URL ends up in logs); logs name only the origin.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import msgspec
import trio

from bridge.codecs.a2a_v03_server import lower_task_v03 as lower_task_rpc
from bridge.codecs.a2a_server import A2AFault
from bridge.codecs.a2a_task import TaskProjector
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.core.identity import Identity
from bridge.errors import InvalidParams, NotFound
from bridge.fronts import owners
from bridge.fronts.a2a.state import A2APushConfig, Kept
from bridge.fronts.a2a.tasks import TaskService
from bridge.schema import a2a as s

__all__ = ["PushService", "host_allowed"]

log = logging.getLogger("bridge.fronts.a2a.front")

_enc = msgspec.json.Encoder()
_RETRY = {408, 425, 429}
_MAX_SILENCED = 1024  # webhooks whose refusal was logged (once each)


def host_allowed(url: str, allowed: list[str]) -> bool:
    """Whether `url` is http(s) to a host the allow-list names ("host", "host:port", "*.domain", "*")."""
    try:
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return False
    host = (u.hostname or "").lower().rstrip(".")
    if u.scheme not in ("http", "https") or not host or u.username is not None or u.password is not None:
        return False
    for entry in allowed:
        if entry == "*":
            return True
        name, want = _split_entry(entry)
        if want is not None and want != port:
            continue
        if host == name or (name.startswith("*.") and host.endswith(name[1:])):
            return True
    return False


def _split_entry(entry: str) -> tuple[str, int | None]:
    """("host", port or None) of an allow-list entry: "host", "host:port", "[v6]:port"."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    return host.lower(), int(port) if port else None


def _origin(url: str) -> str:
    """A webhook URL fit for a log line or an error: scheme://host[:port] only. Its path,
    query and user info may hold the receiver's secret (many webhooks carry one there)."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return "(not a valid URL)"
    host = u.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{u.scheme}://{host}{':' + str(port) if port else ''}"


class _Hook:
    __slots__ = ("url", "headers", "queue", "running")

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers
        self.queue: deque[bytes] = deque()
        self.running = False


class PushService:
    def __init__(self, cfg: A2AFrontConfig, tasks: TaskService) -> None:
        self.cfg = cfg
        self.tasks = tasks
        self._hooks: dict[tuple[str, str], _Hook] = {}
        self._silenced: dict[tuple[str, str], None] = {}  # (task, config) refused, said once
        self._quiet = trio.Event()  # set while nothing is queued
        self._quiet.set()
        self._client: Any = None
        tasks.push = self
        tasks.manager.before_close.append(self.finish)

    async def finish(self) -> None:
        """The daemon stops (after the drain): deliver what is queued, then close the client.
        The caller bounds the wait; cancelled, it says how much is lost."""
        try:
            await self._quiet.wait()
        finally:
            left = sum(len(h.queue) for h in self._hooks.values())
            if left:
                log.warning("stopping: %d push notification(s) to %d webhook(s) not delivered", left, len(self._hooks))
            if self._client is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self._client.aclose()
                self._client = None

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.push_allowed_hosts)

    def check(self, config: s.TaskPushNotificationConfig) -> None:
        if not self.enabled:
            raise A2AFault("PushNotificationNotSupported", "this agent sends no push notifications ([a2a] push_allowed_hosts is empty)")
        if not config.url:
            raise InvalidParams("the push notification config needs a url")
        if not host_allowed(config.url, self.cfg.push_allowed_hosts):
            raise InvalidParams(
                f"webhook {_origin(config.url)} is not allowed: it must be http(s), without user info, to a host in [a2a] push_allowed_hosts"
            )

    # -- configs ---------------------------------------------------------------------------
    async def _task(self, route: str, task_id: str) -> Kept:
        if not self.enabled:
            raise A2AFault("PushNotificationNotSupported", "this agent sends no push notifications")
        return await self.tasks.kept(route, task_id)

    async def _save(self, kept: Kept) -> None:
        """Write the task's row now, through its session (in the store's one transaction per write)."""
        session = await self.tasks.manager.get(kept.record.session_id)
        session.stage_task(kept.row())
        await session.save_record()

    async def create(
        self, route: str, config: s.TaskPushNotificationConfig, *, dialect: str, creator: Identity | None = None
    ) -> s.TaskPushNotificationConfig:
        self.check(config)
        kept = await self._task(route, config.task_id)
        stored = self.register(kept, config, dialect=dialect, creator=creator)
        await self._save(kept)
        return _config(config.task_id, stored)

    def register(self, kept: Kept, config: s.TaskPushNotificationConfig, *, dialect: str, creator: Identity | None = None) -> A2APushConfig:
        """Keep a (checked) config with its task (the caller writes its row); the next state change is POSTed."""
        configs = kept.task.push
        cid = config.id or uuid.uuid4().hex
        configs[:] = [c for c in configs if c.id != cid]
        if len(configs) >= self.cfg.push_max_configs:
            raise InvalidParams(f"a task takes at most {self.cfg.push_max_configs} push notification configs")
        auth = config.authentication
        stored = A2APushConfig(
            id=cid,
            url=config.url,
            dialect=dialect,
            token=config.token or None,
            scheme=auth.scheme if auth is not None else None,
            credentials=(auth.credentials or None) if auth is not None else None,
            creator=msgspec.structs.replace(creator, expires_at=None) if creator is not None else None,
        )
        configs.append(stored)
        return stored

    async def get(self, route: str, task_id: str, config_id: str) -> s.TaskPushNotificationConfig:
        configs = (await self._task(route, task_id)).task.push
        found = next((c for c in configs if c.id == config_id), None) if config_id else (configs[0] if configs else None)
        if found is None:
            raise NotFound(f"task {task_id} has no push notification config {config_id!r}")
        return _config(task_id, found)

    async def list(self, route: str, req: s.ListTaskPushNotificationConfigsRequest) -> s.ListTaskPushNotificationConfigsResponse:
        configs = [_config(req.task_id, c) for c in (await self._task(route, req.task_id)).task.push]
        size = req.page_size or 100
        try:
            start = int(req.page_token) if req.page_token else 0
        except ValueError:
            raise InvalidParams(f"invalid pageToken {req.page_token!r}") from None
        page = configs[start : start + size]
        more = start + size < len(configs)
        return s.ListTaskPushNotificationConfigsResponse(configs=page, next_page_token=str(start + size) if more else "")

    async def delete(self, route: str, task_id: str, config_id: str) -> None:
        kept = await self._task(route, task_id)
        configs = kept.task.push
        left = [c for c in configs if c.id != config_id]
        if len(left) == len(configs):
            raise NotFound(f"task {task_id} has no push notification config {config_id!r}")
        kept.task.push = left
        await self._save(kept)

    # -- delivery ------------------------------------------------------------------------------
    def notify(self, session: Any, kept: Kept, event: s.StreamResponse) -> None:
        """The task's state changed (called synchronously, from the session's delivery)."""
        if kept.task.push:
            self._send(session, kept.projector, event, kept.task.push)

    def _send(self, session: Any, projector: TaskProjector, event: s.StreamResponse, configs: list[A2APushConfig]) -> None:
        bodies: dict[str, bytes] = {}
        config = self.tasks.manager.config
        for c in configs:
            if c.creator is not None and owners.refusal(config, session.record, c.creator, "watch", "use") is not None:
                self._refused(projector.task_id, c)  # the rules now refuse its creator: nothing is sent
                continue
            if self._silenced:
                self._silenced.pop((projector.task_id, c.id), None)  # allowed again: a next refusal is said
            dialect = c.dialect
            body = bodies.get(dialect)
            if body is None:
                if dialect == "1.0":
                    body = _enc.encode(s.StreamResponse(status_update=event.status_update))
                else:
                    body = _enc.encode(lower_task_rpc(projector.snapshot(history_length=0)))
                bodies[dialect] = body
            key = (projector.task_id, c.id)
            hook = self._hooks.get(key)
            if hook is None:
                headers = {"content-type": "application/a2a+json" if dialect == "1.0" else "application/json"}
                if c.scheme and c.credentials:
                    headers["authorization"] = f"{c.scheme} {c.credentials}"
                if c.token:
                    headers["x-a2a-notification-token"] = c.token
                hook = self._hooks[key] = _Hook(c.url, headers)
                if self._quiet.is_set():
                    self._quiet = trio.Event()
            if len(hook.queue) >= self.cfg.push_queue_max:
                hook.queue.popleft()
                log.warning("task %s: webhook %s is behind; its oldest notification was dropped", projector.task_id, _origin(hook.url))
            hook.queue.append(body)
            if not hook.running:
                hook.running = True
                session.shared_nursery.start_soon(self._deliver, key, hook)

    async def _deliver(self, key: tuple[str, str], hook: _Hook) -> None:
        from bridge.transport.http import open_client

        if self._client is None:
            self._client = open_client(connect_timeout_s=self.cfg.push_timeout_s, timeout_s=self.cfg.push_timeout_s)
        try:
            while hook.queue:
                body = hook.queue[0]
                delay = self.cfg.push_backoff_s
                for attempt in range(1, self.cfg.push_max_attempts + 1):
                    if not host_allowed(hook.url, self.cfg.push_allowed_hosts):
                        log.warning("task %s: webhook %s is no longer allowed; dropped", key[0], _origin(hook.url))
                        hook.queue.clear()
                        return
                    why = await self._post(hook, body)
                    if why is None:
                        break
                    if why.startswith("final:") or attempt == self.cfg.push_max_attempts:
                        log.warning("task %s: push notification to %s not delivered (%s, %d attempts)",
                                    key[0], _origin(hook.url), why, attempt)  # fmt: skip
                        break
                    await trio.sleep(delay * (0.75 + random.random() / 2))  # jitter spreads retries out
                    delay = min(delay * 2, self.cfg.push_max_backoff_s)
                if hook.queue and hook.queue[0] is body:
                    hook.queue.popleft()
        finally:
            hook.running = False
            if not hook.queue:
                self._hooks.pop(key, None)
                if not self._hooks:
                    self._quiet.set()

    def _refused(self, task_id: str, c: A2APushConfig) -> None:
        key = (task_id, c.id)
        if key in self._silenced:
            return
        self._silenced[key] = None
        if len(self._silenced) > _MAX_SILENCED:
            del self._silenced[next(iter(self._silenced))]
        assert c.creator is not None
        log.warning("task %s: webhook %s not notified: the route's access rules no longer let %s, who set it, follow the task",
                    task_id, _origin(c.url), c.creator.subject)  # fmt: skip

    async def _post(self, hook: _Hook, body: bytes) -> str | None:
        """None when delivered; else why not ("final: ..." when a retry cannot help)."""
        import httpx

        try:
            r = await self._client.post(hook.url, content=body, headers=hook.headers)
        except httpx.HTTPError as exc:
            return type(exc).__name__
        if 200 <= r.status_code < 300:
            return None
        if r.status_code in _RETRY or r.status_code >= 500:
            return f"HTTP {r.status_code}"
        return f"final: HTTP {r.status_code}"


def _config(task_id: str, c: A2APushConfig) -> s.TaskPushNotificationConfig:
    """A stored config as every answer gives it (Create, Get, List): without `token` and
    `authentication.credentials`, what the webhook receiver checks (A2A 1.0
    `TaskPushNotificationConfig`; `credentials` become the `Authorization` it gets).
    Any client that may read the task may read its configs; only the one that set
    them should hold those (issue 13, finding 11). The scheme stays: it is no secret."""
    auth = s.AuthenticationInfo(scheme=c.scheme) if c.scheme else None
    return s.TaskPushNotificationConfig(url=c.url, task_id=task_id, id=c.id, authentication=auth)
