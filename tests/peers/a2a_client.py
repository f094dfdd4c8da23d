"""An A2A client on the official a2a-sdk (1.3), run as its own process by tests/test_e2e_a2a_front.py.

    python a2a_client.py '{"url": "http://127.0.0.1:PORT", "route": "demo",
                           "binding": "JSONRPC"|"HTTP+JSON", "dialect": "1.0"|"0.3",
                           "token": null, "scenarios": [["name", {args}], ...]}'

It reads the route's agent card with a2a-sdk's resolver, keeps only the card's
interfaces of the asked dialect (a 1.3 client prefers 1.0; keeping only 0.3 makes it
speak 0.3 through its compat transports), and creates its clients with
`ClientFactory`. Each scenario drives the bridge through the SDK only and returns
what the SDK parsed; the report on stdout is `{"results": {name: result}}`, an
error as `{"error": <exception class>, "message": ...}`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import traceback
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver, parse_agent_card
from a2a.compat.v0_3 import types as types_v03
from a2a.types import a2a_pb2 as pb
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict


class Ctx:
    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = opts
        self.base = f"{opts['url']}/a2a/{opts['route']}"
        headers = {"Authorization": f"Bearer {opts['token']}"} if opts.get("token") else {}
        self.http = httpx.AsyncClient(timeout=60, headers=headers)
        self.card: pb.AgentCard | None = None
        self.n = 0

    async def resolve(self) -> pb.AgentCard:
        if self.card is None:
            card = await A2ACardResolver(self.http, self.base).get_agent_card()
            keep = [i for i in card.supported_interfaces if i.protocol_version == self.opts["dialect"]]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(keep)
            self.card = card
        return self.card

    async def client(self, *, streaming: bool) -> Any:
        card = await self.resolve()
        config = ClientConfig(streaming=streaming, supported_protocol_bindings=[self.opts["binding"]], httpx_client=self.http)
        return ClientFactory(config).create(card)

    def message(self, text: str | None = None, *, context_id: str = "", task_id: str = "", data: Any = None, refs: list[str] | None = None) -> pb.Message:
        self.n += 1
        parts = []
        if text is not None:
            parts.append(pb.Part(text=text))
        if data is not None:
            parts.append(pb.Part(data=ParseDict(data, struct_pb2.Value())))
        return pb.Message(
            message_id=f"client-{self.n}", role=pb.ROLE_USER, parts=parts, context_id=context_id, task_id=task_id,
            reference_task_ids=refs or [],
        )  # fmt: skip


def d(m: Any) -> dict[str, Any]:
    return MessageToDict(m)


def error(exc: BaseException) -> dict[str, Any]:
    return {"error": type(exc).__name__, "message": str(exc)}


async def send(ctx: Ctx, message: pb.Message, *, streaming: bool, return_immediately: bool = False, history_length: int | None = None) -> list[dict[str, Any]]:
    client = await ctx.client(streaming=streaming)
    req = pb.SendMessageRequest(message=message)
    if return_immediately:
        req.configuration.return_immediately = True
    if history_length is not None:
        req.configuration.history_length = history_length
    return [d(ev) async for ev in client.send_message(req)]


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client makes of a stream (or a one-event blocking answer)."""
    out: dict[str, Any] = {"kinds": [next(iter(e)) for e in events], "text": "", "task_id": None, "context_id": None, "state": None}
    artifacts: dict[str, dict[str, Any]] = {}
    for e in events:
        if "task" in e:
            t = e["task"]
            out["task_id"], out["context_id"], out["state"] = t["id"], t["contextId"], t["status"]["state"]
            out["status_message"] = t["status"].get("message")
            for a in t.get("artifacts", []):
                artifacts[a["artifactId"]] = {"name": a.get("name"), "text": "".join(p.get("text", "") for p in a["parts"]), "last": False}
            out["history"] = t.get("history", [])
        elif "statusUpdate" in e:
            u = e["statusUpdate"]
            out["task_id"], out["context_id"], out["state"] = u["taskId"], u["contextId"], u["status"]["state"]
            out["status_message"] = u["status"].get("message")
        elif "artifactUpdate" in e:
            u = e["artifactUpdate"]
            a = u["artifact"]
            text = "".join(p.get("text", "") for p in a["parts"])
            got = artifacts.get(a["artifactId"]) if u.get("append") else None
            if got is None:
                artifacts[a["artifactId"]] = got = {"name": a.get("name"), "text": "", "last": False}
            got["text"] += text
            got["last"] = bool(u.get("lastChunk"))
        elif "message" in e:
            out["text"] = "".join(p.get("text", "") for p in e["message"]["parts"])
    out["artifacts"] = artifacts
    out["text"] = out["text"] or "".join(a["text"] for a in artifacts.values())
    return out


# -- scenarios -----------------------------------------------------------------------------


async def sc_card(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """The card as a 1.0 client and as a 0.3 client read it."""
    r10 = await ctx.http.get(f"{ctx.base}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
    r03 = await httpx.AsyncClient(timeout=10, headers=dict(ctx.http.headers)).get(f"{ctx.base}/.well-known/agent-card.json")
    c10 = parse_agent_card(copy.deepcopy(r10.json()))
    legacy = r03.json()
    old = types_v03.AgentCard.model_validate(legacy)  # what a 0.3 client validates against
    as10 = parse_agent_card(copy.deepcopy(legacy))  # and the merged card still reads as 1.0
    again = await ctx.http.get(f"{ctx.base}/.well-known/agent-card.json", headers={"A2A-Version": "1.0", "If-None-Match": r10.headers["etag"]})
    return {
        "v10": d(c10),
        "v10_headers": {k: r10.headers.get(k) for k in ("etag", "cache-control", "vary", "content-type")},
        "v10_raw_keys": sorted(r10.json()),
        "legacy_keys": sorted(legacy),
        "v03": old.model_dump(mode="json", by_alias=True, exclude_none=True),
        "legacy_as_10": d(as10),
        "revalidated": again.status_code,
    }


async def sc_send(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    events = await send(ctx, ctx.message(args.get("text", "hello there"), context_id=args.get("context_id", "")), streaming=args.get("streaming", False))
    return {"events": events, **summary(events)}


async def sc_ask(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """A question (INPUT_REQUIRED), answered by the next message on the task."""
    streaming = args.get("streaming", False)
    first = summary(await send(ctx, ctx.message(args.get("text", "ask: hello")), streaming=streaming))
    reply = ctx.message(args.get("answer"), task_id=first["task_id"], data=args.get("answer_data"))
    second = summary(await send(ctx, reply, streaming=streaming))
    return {"first": first, "second": second}


async def sc_cancel(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    client = await ctx.client(streaming=False)
    started = summary(await send(ctx, ctx.message(args.get("text", "slow: long")), streaming=False, return_immediately=True))
    await asyncio.sleep(args.get("after_s", 0.3))
    canceled = d(await client.cancel_task(pb.CancelTaskRequest(id=started["task_id"])))
    got = d(await client.get_task(pb.GetTaskRequest(id=started["task_id"])))
    try:
        again: Any = d(await client.cancel_task(pb.CancelTaskRequest(id=started["task_id"])))
    except Exception as exc:  # noqa: BLE001 - the SDK's typed error is the result
        again = error(exc)
    return {"started": started, "canceled": canceled, "got": got, "again": again}


async def sc_tasks(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """Two tasks in one context, GetTask with historyLength, ListTasks with filters and paging."""
    client = await ctx.client(streaming=False)
    one = summary(await send(ctx, ctx.message("tool: first"), streaming=False))
    two = summary(await send(ctx, ctx.message("second", context_id=one["context_id"], refs=[one["task_id"]]), streaming=False))
    out: dict[str, Any] = {"one": one, "two": two}
    out["get"] = d(await client.get_task(pb.GetTaskRequest(id=one["task_id"])))
    out["get_h1"] = d(await client.get_task(pb.GetTaskRequest(id=one["task_id"], history_length=1)))
    if ctx.opts["dialect"] == "1.0":
        out["list"] = d(await client.list_tasks(pb.ListTasksRequest(context_id=one["context_id"])))
        page1 = d(await client.list_tasks(pb.ListTasksRequest(context_id=one["context_id"], page_size=1, include_artifacts=True)))
        page2 = d(await client.list_tasks(pb.ListTasksRequest(context_id=one["context_id"], page_size=1, page_token=page1.get("nextPageToken", ""))))
        out["pages"] = [page1, page2]
        out["completed"] = d(await client.list_tasks(pb.ListTasksRequest(status=pb.TASK_STATE_COMPLETED, page_size=100)))
    return out


async def sc_subscribe(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """Two late subscribers to a running task see the same events; a disconnect does not cancel it."""
    started = summary(await send(ctx, ctx.message(args.get("text", "slow: x")), streaming=False, return_immediately=True))
    tid = started["task_id"]

    async def watch(n: int | None = None) -> list[dict[str, Any]]:
        client = await ctx.client(streaming=True)
        got = []
        async for ev in client.subscribe(pb.SubscribeToTaskRequest(id=tid)):
            got.append(d(ev))
            if n is not None and len(got) >= n:
                break
        return got

    async def cancel_later() -> None:
        if args.get("cancel_after_s") is not None:
            await asyncio.sleep(args["cancel_after_s"])
            await (await ctx.client(streaming=False)).cancel_task(pb.CancelTaskRequest(id=tid))

    await asyncio.sleep(args.get("after_s", 0.2))
    quitter = await watch(2)  # leaves early: the task must go on
    a, b, _ = await asyncio.gather(watch(), watch(), cancel_later())
    client = await ctx.client(streaming=False)
    final = d(await client.get_task(pb.GetTaskRequest(id=tid)))
    try:
        terminal: Any = await watch()
    except Exception as exc:  # noqa: BLE001
        terminal = error(exc)
    return {"a": a, "b": b, "quitter": quitter, "final": final, "terminal": terminal, "summary": summary(a)}


async def sc_expiry(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """Streams opened with a token that expires in `ttl_s` end then, the task going on:
    GetTask and SubscribeToTask with a fresh token still find it running. Tokens are
    minted here, just before each call, with the test issuer's key (`key_pem`, `kid`)."""
    import time

    import jwt

    def use(ttl_s: int) -> None:  # the shared httpx client's header: every later request carries it
        now = int(time.time())
        claims = {**args["claims"], "iat": now, "exp": now + ttl_s}
        ctx.http.headers["Authorization"] = "Bearer " + jwt.encode(claims, args["key_pem"], algorithm="RS256", headers={"kid": args["kid"]})

    use(args["ttl_s"])
    streamed = [d(ev) async for ev in (await ctx.client(streaming=True)).send_message(pb.SendMessageRequest(message=ctx.message(args["text"])))]
    tid = summary(streamed)["task_id"]
    use(300)
    after_stream = d(await (await ctx.client(streaming=False)).get_task(pb.GetTaskRequest(id=tid)))
    use(args["ttl_s"])
    subscribed = [d(ev) async for ev in (await ctx.client(streaming=True)).subscribe(pb.SubscribeToTaskRequest(id=tid))]
    use(300)
    fresh = []
    async for ev in (await ctx.client(streaming=True)).subscribe(pb.SubscribeToTaskRequest(id=tid)):
        fresh.append(d(ev))
        if len(fresh) >= 2:  # the task as it is, then a later event: it still runs
            break
    client = await ctx.client(streaming=False)
    await client.cancel_task(pb.CancelTaskRequest(id=tid))
    final = d(await client.get_task(pb.GetTaskRequest(id=tid)))
    return {"streamed": summary(streamed), "after_stream": after_stream, "subscribed": summary(subscribed),
            "fresh": [next(iter(e)) for e in fresh], "final": final}  # fmt: skip


async def sc_push(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    client = await ctx.client(streaming=False)
    started = summary(await send(ctx, ctx.message(args.get("text", "slow: x")), streaming=False, return_immediately=True))
    tid = started["task_id"]
    config = pb.TaskPushNotificationConfig(task_id=tid, id="hook1", url=args["webhook"], token="tok-1")
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = "hook-secret"
    out: dict[str, Any] = {"task_id": tid, "created": d(await client.create_task_push_notification_config(config))}
    out["got"] = d(await client.get_task_push_notification_config(pb.GetTaskPushNotificationConfigRequest(task_id=tid, id="hook1")))
    if args.get("answer"):  # a task that will wait for input: the answer moves it on
        while (await client.get_task(pb.GetTaskRequest(id=tid))).status.state != pb.TASK_STATE_INPUT_REQUIRED:
            await asyncio.sleep(0.05)
        out["answered"] = summary(await send(ctx, ctx.message(args["answer"], task_id=tid), streaming=False))
    if ctx.opts["dialect"] == "1.0" or ctx.opts["binding"] == "JSONRPC":
        out["listed"] = d(await client.list_task_push_notification_configs(pb.ListTaskPushNotificationConfigsRequest(task_id=tid)))
    try:
        bad = pb.TaskPushNotificationConfig(task_id=tid, id="evil", url="http://169.254.169.254/latest/meta-data")
        out["refused"] = d(await client.create_task_push_notification_config(bad))
    except Exception as exc:  # noqa: BLE001
        out["refused"] = error(exc)
    while True:
        task = await client.get_task(pb.GetTaskRequest(id=tid))
        if task.status.state in (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED):
            break
        await asyncio.sleep(0.1)
    out["final"] = d(task)
    if ctx.opts["dialect"] == "1.0" or ctx.opts["binding"] == "JSONRPC":
        await client.delete_task_push_notification_config(pb.DeleteTaskPushNotificationConfigRequest(task_id=tid, id="hook1"))
        out["after_delete"] = d(await client.list_task_push_notification_configs(pb.ListTaskPushNotificationConfigsRequest(task_id=tid)))
    return out


async def sc_errors(ctx: Ctx, args: dict[str, Any]) -> dict[str, Any]:
    """The A2A errors the SDK maps to its typed exceptions."""
    client = await ctx.client(streaming=False)
    out: dict[str, Any] = {}

    async def attempt(name: str, coro: Any) -> None:
        try:
            result = await coro
            out[name] = {"ok": d(result) if hasattr(result, "DESCRIPTOR") else result}
        except Exception as exc:  # noqa: BLE001
            out[name] = error(exc)

    done = summary(await send(ctx, ctx.message("hello"), streaming=False))
    await attempt("unknown_task", client.get_task(pb.GetTaskRequest(id="no-such-task")))
    await attempt("not_cancelable", client.cancel_task(pb.CancelTaskRequest(id=done["task_id"])))
    await attempt("to_terminal", send(ctx, ctx.message("more", task_id=done["task_id"]), streaming=False))
    await attempt("unknown_context", send(ctx, ctx.message("hi", context_id="no-such-context"), streaming=False))
    await attempt("extended_card", client.get_extended_agent_card(pb.GetExtendedAgentCardRequest()))
    streaming = await ctx.client(streaming=True)

    async def sub() -> list[Any]:
        return [d(e) async for e in streaming.subscribe(pb.SubscribeToTaskRequest(id=done["task_id"]))]

    await attempt("subscribe_terminal", sub())
    return out


SCENARIOS = {
    "expiry": sc_expiry,
    "card": sc_card,
    "send": sc_send,
    "ask": sc_ask,
    "cancel": sc_cancel,
    "tasks": sc_tasks,
    "subscribe": sc_subscribe,
    "push": sc_push,
    "errors": sc_errors,
}


async def main() -> None:
    opts = json.loads(sys.argv[1])
    ctx = Ctx(opts)
    results: dict[str, Any] = {}
    for name, args in opts["scenarios"]:
        key = args.pop("as", name) if isinstance(args, dict) else name
        try:
            results[key] = await asyncio.wait_for(SCENARIOS[name](ctx, args), opts.get("timeout_s", 60))
        except Exception as exc:  # noqa: BLE001 - reported, the test decides
            results[key] = {**error(exc), "traceback": traceback.format_exc()}
    await ctx.http.aclose()
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    asyncio.run(main())
