"""Cost per call against history and store size (issue 16): each path at a small and a large size, one run.

Two daemons side by side (`agent-bridge serve`, demo back with `chunk_delay_s = 0`,
SQLite in a temp dir), one holding the small state, one the large; both are built and
called through the protocols' public surfaces only (A2A JSON-RPC, the chat REST API,
/ws, ACP on the daemon's unix socket), so the bench runs unchanged whatever the store
does inside. The two are built in the same phases, and each path is measured on both
when each store holds exactly the state it is named for:

1. S sessions of one task each, made by contextless A2A `SendMessage` (one in ten
   `fail:`, so a `status` filter has something to leave out): S = 10 vs --sessions.
   - A2A `ListTasks` without a contextId: pageSize 10 (a full page at both sizes),
     the same with `status` = COMPLETED, and pageSize 50 (10 tasks on the small
     page, 50 on the large one).
   - `GET /api/sessions`, limit 10 and the default page: 10 one-turn sessions vs S.
   (In the large daemon, first: two chat sessions of --turns turns alone in the
   store, for `GET /api/sessions` beside 10 one-turn sessions.)
2. One A2A context of N tasks (sequential `SendMessage` with its contextId):
   N = 20 vs --tasks. A blocking `SendMessage` "hello" into it, interleaved with one
   into a fresh context (no contextId): the two are compared on the large daemon
   (goal: into N tasks within 1.5 × a fresh context) and across the two daemons.
3. One chat session of T turns (`chat:send` "hello" over /ws, 9 frames a turn):
   T = 100 vs --turns.
   - /ws resume: `session:subscribe` with `after_sequence` = last − 10 on an open
     connection not subscribed to it; time until the 10th replayed frame.
   - /ws first subscribe (no `after_sequence`): time until `session:subscribed`.
   - REST `GET /api/sessions/{id}/messages` (its default answer).
   - ACP `session/load` on a new unix-socket connection: time until its response.
     The ACP schema has `session/load` replay the whole conversation, so it is
     judged per replayed `session/update` (its total time is shown beside).

Each call runs --warmup (3) times untimed, then --rounds (15) times timed, the calls of
a phase on both daemons interleaved and each daemon let go idle after each call, so load
from elsewhere weighs on both sizes alike. The figure is the median wall time seen by a
client in this process (raw HTTP/1.1, trio-websocket or NDJSON, decoding nothing while
timed), with the daemon's median CPU time over the same windows beside it. Build times,
RSS and store size are printed as each build finishes.

Goals (issue 16): every judged ratio large/small ≤ 1.5; one message into a context of
5,000 tasks within 1.5 × one into a fresh context. Not judged ("info"): ListTasks at
pageSize 50 (10 tasks listed vs 50, each rendered from its events), `GET /api/sessions`'
default page (10 sessions listed vs 50; `limit=10` is the judged row) and the whole
`session/load` call (it replays the whole history, as ACP says).

    .venv/bin/python bench/scaling.py --quick     # 1/10 of the large sizes, ~30-90 s
    .venv/bin/python bench/scaling.py             # --tasks 5000 --sessions 10000 --turns 5000, ~5-8 min
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, clean_env, median, table  # noqa: E402
from _wire import (  # noqa: E402
    A2A_HEADERS, MAX_MESSAGE, AcpLines, Call, Http, Meter, a2a_result, dir_mib, frame, idle, measure, rpc, rss_mib,
    send_body, until_frame,
)  # fmt: skip

GOAL = 1.5
SMALL = {"tasks": 20, "sessions": 10, "turns": 100}
MISSED = 10  # frames a resuming /ws client missed
A2A = "/a2a/demo"


class Daemon:
    def __init__(self, name: str, tmp: Path, *, sessions: int) -> None:
        self.name, self.dir = name, tmp / name
        self.dir.mkdir()
        self.sock = str(self.dir / "acp.sock")
        (self.dir / "bench.toml").write_text(
            'default_route = "demo"\nlog_level = "warning"\n'
            '[routes.demo]\nback = { kind = "demo", chunk_delay_s = 0.0 }\n'
            '[server]\nlisten = "127.0.0.1:0"\ngraceful_timeout_s = 1\n'
            # Room for every session the build makes; the chat client sends a turn as soon
            # as the last one ended (the per-connection rate limit is for browsers).
            f'[daemon]\nacp_socket = "{self.sock}"\nmax_live_sessions = {max(2000, 2 * sessions)}\nmetrics = false\n'
            "[ws]\nmax_messages_per_s = 1000000.0\nmessage_burst = 1000000\n"
        )
        self.proc: trio.Process | None = None
        self.port = 0

    async def start(self) -> None:
        exe = Path(PYTHON).with_name("agent-bridge")
        cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "bridge"]
        cmd += ["serve", "--config", str(self.dir / "bench.toml"), "--state-dir", str(self.dir / "state")]
        with open(self.dir / "daemon.log", "wb") as log:
            self.proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=log, env=clean_env())
        buf = b""
        with trio.fail_after(30):
            while b"\n" not in buf:
                chunk = await self.proc.stdout.receive_some()  # type: ignore[union-attr]
                if not chunk:
                    raise SystemExit(f"the {self.name} daemon did not start: {(self.dir / 'daemon.log').read_text()[-2000:]}")
                buf += chunk
        self.port = int(buf.split()[1].rsplit(b":", 1)[1])
        # Once listening, it imports the `mcp` SDK in a worker thread (~0.5 s of CPU): not in the first calls.
        await idle(self.pid, window=0.25, limit=30)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        with trio.move_on_after(10):
            await self.proc.wait()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def built(self, what: str, seconds: float, extra: str = "") -> None:
        print(f"[{self.name}] built {what} in {seconds:.1f} s{extra}; daemon RSS {rss_mib(self.pid):.0f} MiB, "
              f"store {dir_mib(str(self.dir / 'state')):.1f} MiB", flush=True)  # fmt: skip
        await idle(self.pid, window=0.25, limit=30)  # sessions left to close, batches to flush


# -- building the state ------------------------------------------------------------------


async def one_task_sessions(d: Daemon, n: int, conns: int = 8) -> None:
    """n contextless SendMessage (one in ten `fail:`), `conns` connections at once."""
    t0, left = time.perf_counter(), iter(range(n))

    async def worker() -> None:
        async with Http.opened(d.port) as http:
            for i in left:
                task = a2a_result(*await http.request("POST", A2A, send_body("fail: hello" if i % 10 == 9 else "hello"), A2A_HEADERS))["task"]
                assert task["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"), task["status"]

    async with trio.open_nursery() as nursery:
        for _ in range(min(conns, n)):
            nursery.start_soon(worker)
    await d.built(f"{n:,} one-task A2A sessions ({conns} clients)", time.perf_counter() - t0)


async def context_of(d: Daemon, n: int) -> str:
    """A context of n tasks, one message at a time (a context runs one task at a time)."""
    t0, context, marks = time.perf_counter(), None, []
    async with Http.opened(d.port) as http:
        for _ in range(n):
            task = a2a_result(*await http.request("POST", A2A, send_body(context=context), A2A_HEADERS))["task"]
            context = task["contextId"]
            marks.append(time.perf_counter())
    tenth = max(1, n // 10)
    first, last = (marks[tenth - 1] - t0) / tenth, (marks[-1] - marks[-1 - tenth]) / tenth if n > tenth else 0.0
    await d.built(f"a context of {n:,} tasks", marks[-1] - t0, f" ({first * 1e3:.1f} ms a task for the first tenth, {last * 1e3:.1f} ms for the last)")
    assert context is not None
    return context


async def chat_sessions(d: Daemon, count: int, turns: int) -> list[str]:
    """`count` chat sessions of `turns` turns each, built side by side (one /ws client each)."""
    async with Http.opened(d.port) as http:
        sids = [(await http.json("POST", "/api/sessions", {"route": "demo"}))["session_id"] for _ in range(count)]
    t0 = time.perf_counter()

    async def one(sid: str) -> None:
        async with open_websocket_url(d.ws_url, max_message_size=MAX_MESSAGE) as ws:
            await ws.send_message(frame("session:subscribe", session_id=sid))
            await until_frame(ws, "session:subscribed")
            for _ in range(turns):
                await ws.send_message(frame("chat:send", session_id=sid, message="hello"))
                await until_frame(ws, "chat:end")

    async with trio.open_nursery() as nursery:
        for sid in sids:
            nursery.start_soon(one, sid)
    await d.built(f"{count} chat session(s) of {turns:,} turns", time.perf_counter() - t0)
    return sids


# -- the timed calls -----------------------------------------------------------------------


def get(http: Http, path: str, key: str | None = None) -> Call:
    async def call(m: Meter) -> int:
        await http.ready()
        with m.timing():
            status, body = await http.request("GET", path)
        if status != 200:
            raise SystemExit(f"GET {path}: HTTP {status} {body[:300]!r}")
        doc = json.loads(body)
        return len(doc[key] if key else doc if isinstance(doc, list) else next(v for v in doc.values() if isinstance(v, list)))

    return call


def list_tasks(http: Http, **params: Any) -> Call:
    body = rpc("ListTasks", params)

    async def call(m: Meter) -> int:
        await http.ready()
        with m.timing():
            reply = await http.request("POST", A2A, body, A2A_HEADERS)
        return len(a2a_result(*reply)["tasks"])

    return call


def send(http: Http, context: str | None) -> Call:
    async def call(m: Meter) -> None:
        body = send_body(context=context)
        await http.ready()
        with m.timing():
            reply = await http.request("POST", A2A, body, A2A_HEADERS)
        task = a2a_result(*reply)["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED" and (context is None or task["contextId"] == context), task
        return None

    return call


async def ws_calls(d: Daemon, sid: str, stack: contextlib.AsyncExitStack) -> tuple[Call, Call]:
    """(resume with MISSED frames missed, first subscribe) on one open /ws connection."""
    ws = await stack.enter_async_context(open_websocket_url(d.ws_url, max_message_size=MAX_MESSAGE))

    # Frames left over from a call (`session:commands`, sent after each subscribe) are
    # skipped by the next one; a `session:subscribed` is always read by its own call.
    async def subscribe(m: Meter) -> int:
        with m.timing():
            await ws.send_message(frame("session:subscribe", session_id=sid))
            ack = await until_frame(ws, "session:subscribed")
        await ws.send_message(frame("session:unsubscribe", session_id=sid))
        return int(json.loads(ack)["data"]["sequence"])

    last = await subscribe(Meter(d.pid))

    async def resume(m: Meter) -> int:
        got, seen, acked = 0, "", False
        with m.timing():
            await ws.send_message(frame("session:subscribe", session_id=sid, after_sequence=last - MISSED))
            while got < MISSED:
                seen = await ws.get_message()  # type: ignore[assignment]
                head = seen[:40]
                if '"system:error"' in head:
                    raise SystemExit(f"/ws: {seen[:300]}")
                if '"session:subscribed"' in head:
                    acked = True
                elif '"session:' not in head:
                    got += 1
        data = json.loads(seen)["data"]
        assert data.get("sequence") == last, (last, seen[:200])
        if not acked:
            await until_frame(ws, "session:subscribed")
        await ws.send_message(frame("session:unsubscribe", session_id=sid))
        return got

    return resume, subscribe


def acp_load(d: Daemon, sid: str) -> Call:
    async def call(m: Meter) -> int:
        acp = await AcpLines.connect(d.sock, "demo")
        async with acp.stream:
            with m.timing():
                await acp.send(2, "session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
                _, updates = await acp.answer(2)
        return updates

    return call


# -- one daemon ----------------------------------------------------------------------------


async def run_both(small: Daemon, large: Daemon, sizes: dict[str, int], args: argparse.Namespace) -> dict[str, Meter]:
    """Build both stores phase by phase; measure each path on both, interleaved, when
    each store holds the state the path is named for. Keys: "small:NAME", "large:NAME"."""
    out: dict[str, Meter] = {}

    async def both(calls: Callable[[Daemon, Http], dict[str, Call]]) -> None:
        async with Http.opened(small.port) as hs, Http.opened(large.port) as hl:
            pairs = [(d, name, call) for d, h in ((small, hs), (large, hl)) for name, call in calls(d, h).items()]
            pairs.sort(key=lambda p: p[1])  # small and large of one path side by side
            out.update(await measure({f"{d.name}:{name}": (d.pid, call) for d, name, call in pairs}, args))

    # 1. Ten one-turn sessions vs two long chat sessions, alone in their stores.
    await one_task_sessions(small, SMALL["sessions"])
    long_chats = await chat_sessions(large, 2, sizes["turns"])
    await both(lambda d, h: {"sessions_long": get(h, "/api/sessions", "sessions")})
    # 2. Ten vs S one-task sessions (and the two long ones).
    await one_task_sessions(large, sizes["sessions"])
    await both(lambda d, h: {
        "list10": list_tasks(h, pageSize=10),
        "list10_status": list_tasks(h, pageSize=10, status="TASK_STATE_COMPLETED"),
        "list50": list_tasks(h, pageSize=50),
        "sessions10": get(h, "/api/sessions?limit=10", "sessions"),
        "sessions": get(h, "/api/sessions", "sessions"),
    })  # fmt: skip
    # 3. A context of N tasks.
    contexts = {small.name: await context_of(small, SMALL["tasks"]), large.name: await context_of(large, sizes["tasks"])}
    await both(lambda d, h: {"send_fresh": send(h, None), "send_ctx": send(h, contexts[d.name])})
    # 4. A chat session of T turns.
    chats = {small.name: (await chat_sessions(small, 1, SMALL["turns"]))[0], large.name: long_chats[0]}
    async with contextlib.AsyncExitStack() as stack:
        ws = {d.name: await ws_calls(d, chats[d.name], stack) for d in (small, large)}
        await both(lambda d, h: {
            "resume": ws[d.name][0],
            "subscribe": ws[d.name][1],
            "messages": get(h, f"/api/sessions/{chats[d.name]}/messages"),
            "load": acp_load(d, chats[d.name]),
        })  # fmt: skip
    return out


# -- the report -----------------------------------------------------------------------------


def _t(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def report(results: dict[str, Meter], sizes: dict[str, int]) -> bool:
    small = {k.removeprefix("small:"): m for k, m in results.items() if k.startswith("small:")}
    large = {k.removeprefix("large:"): m for k, m in results.items() if k.startswith("large:")}
    st, lt, ss, ls, sn, ln = SMALL["tasks"], sizes["tasks"], SMALL["sessions"], sizes["sessions"], SMALL["turns"], sizes["turns"]
    sl, ll = small["load"].count or 1, large["load"].count or 1
    rows: list[tuple[str, Meter, Meter, bool, float, float]] = [  # label, small, large, judged, scale of each side
        (f"A2A SendMessage, context of {st} -> {lt:,} tasks", small["send_ctx"], large["send_ctx"], True, 1, 1),
        (f"A2A SendMessage, fresh context -> context of {lt:,} tasks (large store)", large["send_fresh"], large["send_ctx"], True, 1, 1),
        (f"A2A SendMessage, fresh context: {ss} -> {ls:,} sessions in the store", small["send_fresh"], large["send_fresh"], True, 1, 1),
        (f"A2A ListTasks pageSize 10: {ss} -> {ls:,} sessions", small["list10"], large["list10"], True, 1, 1),
        (f"A2A ListTasks pageSize 10, status COMPLETED: {ss} -> {ls:,}", small["list10_status"], large["list10_status"], True, 1, 1),
        (f"A2A ListTasks pageSize 50: {ss} -> {ls:,} ({small['list50'].count} -> {large['list50'].count} tasks listed)", small["list50"], large["list50"], False, 1, 1),
        (f"/ws resume, {MISSED} missed frames: {sn} -> {ln:,} turns", small["resume"], large["resume"], True, 1, 1),
        (f"/ws first subscribe: {sn} -> {ln:,} turns", small["subscribe"], large["subscribe"], True, 1, 1),
        (f"REST /messages, default answer: {sn} -> {ln:,} turns ({small['messages'].count} -> {large['messages'].count} items)", small["messages"], large["messages"], True, 1, 1),
        (f"ACP session/load, per replayed update: {sn} -> {ln:,} turns", small["load"], large["load"], True, sl, ll),
        (f"  (its whole call: {sl:,} -> {ll:,} updates replayed)", small["load"], large["load"], False, 1, 1),
        (f"GET /api/sessions: {ss} one-turn sessions -> 2 of {ln:,} turns", small["sessions_long"], large["sessions_long"], True, 1, 1),
        (f"GET /api/sessions?limit=10: {ss} -> {ls:,} sessions", small["sessions10"], large["sessions10"], True, 1, 1),
        (f"GET /api/sessions default page: {ss} -> {ls:,} sessions ({small['sessions'].count} -> {large['sessions'].count} listed)", small["sessions"], large["sessions"], False, 1, 1),
    ]  # fmt: skip
    out, ok = [], True
    for label, a, b, judged, na, nb in rows:
        wa, wb, ca, cb = median(a.wall) / na, median(b.wall) / nb, median(a.cpu) / na, median(b.cpu) / nb
        ratio = wb / wa
        verdict = ("PASS" if ratio <= GOAL else "FAIL") if judged else "info"
        ok = ok and (ratio <= GOAL or not judged)
        out.append([label, _t(wa), _t(wb), f"{ratio:.2f}", _t(ca), _t(cb), f"{cb / ca:.2f}" if ca else "-", verdict])
    print(f"\nmedians of {len(small['resume'].wall)} timed calls each; CPU: the daemon's, over the same windows")
    print(table(["path: small -> large", "small", "large", "ratio", "CPU small", "CPU large", "CPU ratio", f"<= {GOAL}"], out))
    failed, judged = sum(r[-1] == "FAIL" for r in out), sum(r[-1] != "info" for r in out)
    print(f"\nRATIO worst large/small = {max(float(r[3]) for r in out if r[-1] != 'info'):.2f} (goal <= {GOAL} on every judged row)")
    verdict = "PASS" if ok else f"FAIL ({failed} of {judged} rows)"
    print(f"VERDICT: {verdict}; load average {os.getloadavg()[0]:.1f}")
    return ok


async def run(args: argparse.Namespace, tmp: Path) -> int:
    scale = 10 if args.quick else 1
    sizes = {"tasks": args.tasks // scale, "sessions": args.sessions // scale, "turns": args.turns // scale}
    small, large = Daemon("small", tmp, sessions=SMALL["sessions"]), Daemon("large", tmp, sessions=sizes["sessions"])
    try:
        await small.start()
        await large.start()
        results = await run_both(small, large, sizes, args)
    except BaseException:
        for d in (small, large):  # the temp dir goes with the exception: show why here
            lines = [x for x in (d.dir / "daemon.log").read_text(errors="replace").splitlines() if "on purpose" not in x]
            print(f"--- the {d.name} daemon's log, last lines:", *lines[-15:], sep="\n", file=sys.stderr)
        raise
    finally:
        await small.stop()
        await large.stop()
    return 0 if report(results, sizes) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=5000, help="tasks in the large A2A context (default 5000; small: 20)")
    ap.add_argument("--sessions", type=int, default=10000, help="one-task sessions in the large store (default 10000; small: 10)")
    ap.add_argument("--turns", type=int, default=5000, help="turns of the large chat session (default 5000; small: 100)")
    ap.add_argument("--quick", action="store_true", help="1/10 of the large sizes: a smoke run")
    ap.add_argument("--rounds", type=int, default=15, help="timed calls per path (default 15)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls per path first (default 3)")
    args = ap.parse_args()
    if any(n // (10 if args.quick else 1) <= SMALL[k] for k, n in (("tasks", args.tasks), ("sessions", args.sessions), ("turns", args.turns))):
        ap.error(f"the large sizes (divided by 10 with --quick) must be above the small ones: {SMALL}")
    with tempfile.TemporaryDirectory(prefix="scaling-bench-") as tmp:
        sys.exit(trio.run(run, args, Path(tmp)))


if __name__ == "__main__":
    main()
