"""The chat event stream front: frames per second, added latency, memory per idle session.

  A  bridge: `agent-bridge serve` (demo back, chunk_delay_s = 0); a trio-websocket client
     in this process subscribes to a session and sends `chat:send "bench:N"`; the demo
     emits N message chunks, the client reads N `turn:patch` frames and `chat:end`.
     Rate = N / (time of chat:end − time of the first patch).
  B  ceiling: bench/peers/ws_ceiling.py, a plain trio-websocket server that sends the
     very frames captured from A in this run (identical bytes, one message each) to
     the same client; rate = N / (last frame − first frame).
  (A') the bridge with `[ws] batch_writes = false` (one ASGI `websocket.send` per frame),
     for scale: what hypercorn's per-message ASGI path alone allows.

Throughput rounds are interleaved (B, A, A', B, A, A', ...) on one warm process of each.

Latency, one event end to end: the client sends `chat:send` and times the `chat:start`
frame it causes (the session emits its TurnStarted synchronously, so this is client →
front → session → projector → client), and the first `turn:patch` (the demo back's
first chunk, after the turn's start is stored). The ceiling answers a "ping" with one
frame of the same size. Added latency = bridge − ceiling, at p50 and p99.

Memory: VmRSS of the daemon before and after 1,000 sessions are created (REST) and
subscribed, each on its own WebSocket (`session:subscribed` received), divided by
1,000; beside the ceiling server's VmRSS growth for 1,000 idle trio-websocket
connections. Where it goes (tracemalloc, per subscribed session): hypercorn's
connection (h11, wsproto, its two tasks, the app's queue) about 20 KiB, the /ws
connection and the session's chat stream about 5 KiB, the live session about 2 KiB
(no task while nothing runs in it).

Reuse, on a daemon of its own: waves of `--reuse` sessions (2,000) subscribed the same
way, whose clients then leave; the daemon closes the idle sessions past `[daemon] max_idle_sessions`, and the
next wave comes. VmRSS growth at each wave's peak and once its sessions have closed:
the second wave must fit in the memory the first one freed. (It did not while a
finished connection or session stayed in a reference cycle until a full collection:
each wave of 5,000 added ~50 MiB.) What is freed stays in CPython's arenas for the
next sessions: neither the arenas nor glibc's `malloc_trim` give much of it back.

Goals (issues 5 and 16): throughput ≥ 0.5 × ceiling; memory per idle subscribed
session ≤ 1.5 × a bare trio-websocket connection; a second wave's peak growth ≤ 1.1 ×
the first's.

    .venv/bin/python bench/ws_stream.py                 # N=20000, 5 rounds, ~60 s
    .venv/bin/python bench/ws_stream.py -n 50000 --rounds 7 --sessions 2000 --reuse 5000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PEERS, PYTHON, REPO, clean_env, median, pct, table  # noqa: E402

GOAL_RATE = 0.5
GOAL_MEMORY = 1.5
GOAL_REUSE = 1.1
MAX_MESSAGE = 16 * 1024 * 1024
MAX_IDLE = 64  # [daemon] max_idle_sessions, the default


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_daemon(tmp: str, name: str, *, frames: int, batch: bool, block: int) -> tuple[subprocess.Popen[str], str]:
    config = os.path.join(tmp, f"{name}.toml")
    with open(config, "w") as f:
        f.write(
            "\n".join(
                [
                    'default_route = "demo"',
                    'log_level = "warning"',
                    "[routes.demo]",
                    'back = { kind = "demo", chunk_delay_s = 0.0 }',
                    "[server]",
                    'listen = "127.0.0.1:0"',
                    "graceful_timeout_s = 1",
                    "[daemon]",
                    "acp_socket = false",
                    "max_live_sessions = 100000",  # the waves of --reuse
                    "[ws]",
                    # The demo emits the whole burst at once and a WebSocket client is never
                    # waited for: the queue must hold it (the documented slow-client fate).
                    f"queue_max_frames = {max(8192, frames * 2)}",
                    f"batch_writes = {'true' if batch else 'false'}",
                    f"block_max_chars = {block}",
                    "",
                ]
            )
        )
    exe = os.path.join(os.path.dirname(PYTHON), "agent-bridge")
    cmd = [exe] if os.path.exists(exe) else [PYTHON, "-m", "bridge"]
    proc = subprocess.Popen(
        [*cmd, "serve", "--config", config, "--state-dir", os.path.join(tmp, f"{name}-state")],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(tmp, f"{name}.log"), "w"),  # noqa: SIM115 (open for the process's life)
        text=True,
        env=clean_env(),
        cwd=REPO,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("listening "):
        raise SystemExit(f"the daemon did not start: {line!r}; see {tmp}/{name}.log")
    return proc, line.split()[1]


def start_ceiling(frames_file: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [PYTHON, str(PEERS / "ws_ceiling.py"), frames_file], stdout=subprocess.PIPE, text=True, env=clean_env()
    )
    return proc, proc.stdout.readline().strip()  # type: ignore[union-attr]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def frame(event: str, **data: Any) -> str:
    return json.dumps({"event": event, "data": data})


async def new_session(url: str) -> str:
    async with httpx.AsyncClient(base_url=url) as h:
        return (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]


# -- throughput ---------------------------------------------------------------------------


async def bridge_round(url: str, sid: str, n: int, capture: list[str] | None = None) -> float:
    async with open_websocket_url(url.replace("http", "ws") + "/ws", max_message_size=MAX_MESSAGE) as ws:
        await ws.send_message(frame("session:subscribe", session_id=sid))
        await ws.get_message()
        await ws.send_message(frame("chat:send", session_id=sid, message=f"bench:{n}"))
        first = None
        count = 0
        while True:
            m = await ws.get_message()
            head = m[:24]
            if '"turn:patch"' in head:
                if first is None:
                    first = time.perf_counter()
                count += 1
                if capture is not None:
                    capture.append(m)  # type: ignore[arg-type]
            elif '"chat:end"' in head:
                end = time.perf_counter()
                if capture is not None:
                    capture.append(m)  # type: ignore[arg-type]
                break
    assert count == n and first is not None, (count, n)
    return n / (end - first)


async def ceiling_round(url: str, n: int) -> float:
    async with open_websocket_url(url, max_message_size=MAX_MESSAGE) as ws:
        await ws.send_message("go")
        await ws.get_message()
        first = time.perf_counter()
        for _ in range(n):  # n patches after the first one, the last being chat:end
            await ws.get_message()
        end = time.perf_counter()
    return n / (end - first)


# -- latency ------------------------------------------------------------------------------


async def bridge_latency(url: str, sid: str, samples: int) -> tuple[list[float], list[float]]:
    to_start, to_patch = [], []
    async with open_websocket_url(url.replace("http", "ws") + "/ws", max_message_size=MAX_MESSAGE) as ws:
        await ws.send_message(frame("session:subscribe", session_id=sid))
        await ws.get_message()
        message = frame("chat:send", session_id=sid, message="hi")
        for _ in range(samples):
            t0 = time.perf_counter()
            await ws.send_message(message)
            while '"chat:start"' not in (await ws.get_message())[:24]:
                pass
            to_start.append(time.perf_counter() - t0)
            while '"turn:patch"' not in (await ws.get_message())[:24]:
                pass
            to_patch.append(time.perf_counter() - t0)
            while '"chat:end"' not in (await ws.get_message())[:24]:
                pass
    return to_start, to_patch


async def ceiling_latency(url: str, samples: int) -> list[float]:
    out = []
    async with open_websocket_url(url, max_message_size=MAX_MESSAGE) as ws:
        for _ in range(samples):
            t0 = time.perf_counter()
            await ws.send_message("ping")
            await ws.get_message()
            out.append(time.perf_counter() - t0)
    return out


# -- memory -------------------------------------------------------------------------------


async def hold_connections(
    urls_and_frames: list[tuple[str, str | None]], ready: trio.Event, release: trio.Event
) -> None:
    """Open every connection (50 handshakes at a time), subscribe where asked, hold them open."""
    limiter = trio.CapacityLimiter(50)
    opened = trio.Semaphore(0, max_value=len(urls_and_frames))

    async def one(url: str, first: str | None) -> None:
        token = object()
        await limiter.acquire_on_behalf_of(token)
        try:
            async with open_websocket_url(url, max_message_size=MAX_MESSAGE) as ws:
                if first is not None:
                    await ws.send_message(first)
                    await ws.get_message()  # session:subscribed
                limiter.release_on_behalf_of(token)
                token = None  # type: ignore[assignment]
                opened.release()
                await release.wait()
        finally:
            if token is not None:
                limiter.release_on_behalf_of(token)

    async with trio.open_nursery() as nursery:
        for url, first in urls_and_frames:
            nursery.start_soon(one, url, first)
        for _ in urls_and_frames:
            await opened.acquire()
        ready.set()


async def memory_bridge(url: str, pid: int, n: int) -> float:
    ids = []
    async with httpx.AsyncClient(base_url=url) as h:
        # warm up: one session subscribed and dropped, so first-use costs are not counted
        warm = await new_session(url)
        async with open_websocket_url(url.replace("http", "ws") + "/ws") as ws:
            await ws.send_message(frame("session:subscribe", session_id=warm))
            await ws.get_message()
        await trio.sleep(0.5)
        before = rss_kib(pid)
        for _ in range(n):
            ids.append((await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"])
    ws_url = url.replace("http", "ws") + "/ws"
    ready, release = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            hold_connections, [(ws_url, frame("session:subscribe", session_id=s)) for s in ids], ready, release
        )
        await ready.wait()
        await trio.sleep(1.0)
        after = rss_kib(pid)
        release.set()
    return (after - before) / n


async def live_sessions(h: httpx.AsyncClient) -> int:
    text = (await h.get("/metrics")).text
    return sum(int(float(ln.split()[-1])) for ln in text.splitlines() if ln.startswith("agent_bridge_sessions_live{"))


async def memory_reuse(url: str, pid: int, n: int, waves: int = 2) -> tuple[int, list[tuple[int, int]]]:
    """VmRSS before, then (at the wave's peak, once its sessions closed) for each wave."""
    ws_url = url.replace("http", "ws") + "/ws"
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as h:
        await bridge_round(url, await new_session(url), 1000)  # first-use costs not counted
        await trio.sleep(1.0)
        before = rss_kib(pid)
        for _ in range(waves):
            ids = [(await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"] for _ in range(n)]
            ready, release = trio.Event(), trio.Event()
            async with trio.open_nursery() as nursery:
                frames = [(ws_url, frame("session:subscribe", session_id=s)) for s in ids]
                nursery.start_soon(hold_connections, frames, ready, release)
                await ready.wait()
                await trio.sleep(1.0)
                peak = rss_kib(pid)
                release.set()
            while await live_sessions(h) > MAX_IDLE:  # the clients left: idle sessions closed
                await trio.sleep(0.5)
            await trio.sleep(1.0)
            out.append((peak, rss_kib(pid)))
    return before, out


async def memory_ceiling(url: str, pid: int, n: int) -> float:
    async with open_websocket_url(url):
        pass
    await trio.sleep(0.5)
    before = rss_kib(pid)
    ready, release = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_connections, [(url, None)] * n, ready, release)
        await ready.wait()
        await trio.sleep(1.0)
        after = rss_kib(pid)
        release.set()
    return (after - before) / n


# -- main ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace, tmp: str) -> int:
    n = args.frames
    daemon, url = start_daemon(tmp, "bridge", frames=n, batch=True, block=args.block_max_chars)
    plain, plain_url = start_daemon(tmp, "bridge-asgi", frames=n, batch=False, block=args.block_max_chars) if not args.no_asgi else (None, None)
    ceiling = None
    try:
        sid = await new_session(url)
        plain_sid = await new_session(plain_url) if plain_url else None
        captured: list[str] = []
        await bridge_round(url, sid, n, capture=captured)  # warm-up, and the frames B replays
        frames_file = os.path.join(tmp, "frames.jsonl")
        with open(frames_file, "w", encoding="utf-8") as f:
            f.write("\n".join(captured) + "\n")
        ceiling, ceiling_url = start_ceiling(frames_file)
        await ceiling_round(ceiling_url, n)
        if plain_url:
            await bridge_round(plain_url, plain_sid, n)  # type: ignore[arg-type]
        rates: dict[str, list[float]] = {"ceiling": [], "bridge": [], "asgi": []}
        for _ in range(args.rounds):
            rates["ceiling"].append(await ceiling_round(ceiling_url, n))
            rates["bridge"].append(await bridge_round(url, sid, n))
            if plain_url:
                rates["asgi"].append(await bridge_round(plain_url, plain_sid, n))  # type: ignore[arg-type]
        lat_c: list[float] = []
        lat_s: list[float] = []
        lat_p: list[float] = []
        for _ in range(args.latency_blocks):
            lat_c += await ceiling_latency(ceiling_url, args.latency_samples)
            s, p = await bridge_latency(url, sid, args.latency_samples)
            lat_s += s
            lat_p += p
        mem_b = mem_c = None
        if args.sessions:
            mem_c = await memory_ceiling(ceiling_url, ceiling.pid, args.sessions)
            mem_b = await memory_bridge(url, daemon.pid, args.sessions)
        reuse = None
        if args.reuse:  # on a daemon of its own: no memory freed by the parts above to start with
            fresh, fresh_url = start_daemon(tmp, "bridge-reuse", frames=n, batch=True, block=args.block_max_chars)
            try:
                reuse = await memory_reuse(fresh_url, fresh.pid, args.reuse)
            finally:
                stop(fresh)
    finally:
        for proc in (daemon, plain, ceiling):
            if proc is not None:
                stop(proc)

    sizes = sorted(len(c.encode()) for c in captured)
    size = sum(sizes) // len(sizes)
    rows = [["ceiling (trio-websocket server)", f"{median(rates['ceiling']):,.0f}", "1.00"]]
    rows.append(
        [
            "bridge (/ws, batch_writes)",
            f"{median(rates['bridge']):,.0f}",
            f"{median(rates['bridge']) / median(rates['ceiling']):.2f}",
        ]
    )
    if rates["asgi"]:
        rows.append(
            [
                "bridge (/ws, one ASGI send per frame)",
                f"{median(rates['asgi']):,.0f}",
                f"{median(rates['asgi']) / median(rates['ceiling']):.2f}",
            ]
        )
    print(f"\nthroughput: N={n} frames, {size} bytes on average (max {sizes[-1]}), {args.rounds} rounds, medians")
    print(table(["", "frames/s", "× ceiling"], rows))
    us = lambda xs, p: f"{pct(xs, p) * 1e6:,.0f}"  # noqa: E731
    print(f"\nlatency: {len(lat_c)} samples each, µs")
    print(
        table(
            ["", "p50", "p99"],
            [
                ["ceiling: ping → one frame", us(lat_c, 50), us(lat_c, 99)],
                ["bridge: chat:send → chat:start", us(lat_s, 50), us(lat_s, 99)],
                ["bridge: chat:send → first turn:patch", us(lat_p, 50), us(lat_p, 99)],
            ],
        )
    )
    added50, added99 = pct(lat_s, 50) - pct(lat_c, 50), pct(lat_s, 99) - pct(lat_c, 99)
    print(f"added latency per event (chat:start − ceiling): p50 {added50 * 1e6:,.0f} µs, p99 {added99 * 1e6:,.0f} µs")
    ratio = median(rates["bridge"]) / median(rates["ceiling"])
    ok = ratio >= GOAL_RATE
    print(f"\nRATIO throughput bridge/ceiling = {ratio:.2f} (goal ≥ {GOAL_RATE})")
    if mem_b is not None and mem_c is not None:
        mratio = mem_b / mem_c
        print(
            f"memory per idle subscribed session: bridge {mem_b:.1f} KiB, bare trio-websocket connection {mem_c:.1f} KiB"
        )
        print(f"RATIO memory bridge/trio-websocket = {mratio:.2f} (goal ≤ {GOAL_MEMORY})")
        ok = ok and mratio <= GOAL_MEMORY
    if reuse is not None:
        before, waves = reuse
        mib = lambda kib: f"+{(kib - before) / 1024:.0f}"  # noqa: E731
        print(f"\nreuse: waves of {args.reuse} subscribed sessions whose clients leave, VmRSS over {before / 1024:.0f} MiB")
        print(table(["wave", "peak MiB", "its sessions closed MiB"], [[str(i + 1), mib(p), mib(a)] for i, (p, a) in enumerate(waves)]))
        rratio = (waves[-1][0] - before) / max(1, waves[0][0] - before)
        print(f"RATIO memory last wave peak/first wave peak = {rratio:.2f} (goal ≤ {GOAL_REUSE})")
        ok = ok and rratio <= GOAL_REUSE
    print(f"VERDICT: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--frames", type=int, default=20000, help="frames per throughput round (default 20000)")
    ap.add_argument("--rounds", type=int, default=5, help="throughput rounds (default 5)")
    ap.add_argument("--latency-samples", type=int, default=100, help="round trips per latency block (default 100)")
    ap.add_argument("--latency-blocks", type=int, default=3, help="interleaved latency blocks (default 3)")
    ap.add_argument(
        "--sessions", type=int, default=1000, help="idle subscribed sessions for the memory test; 0 skips it"
    )
    ap.add_argument("--reuse", type=int, default=2000, help="sessions per wave for the reuse test; 0 skips it")
    ap.add_argument("--no-asgi", action="store_true", help="skip the batch_writes = false row")
    ap.add_argument(
        "--block-max-chars",
        type=int,
        default=2048,
        help="[ws] block_max_chars (default 2048, the daemon's): add_content carries the whole block, "
        "so the frames of one long stream average about half of it",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ws-bench-") as tmp:
        sys.exit(trio.run(run, args, tmp))


if __name__ == "__main__":
    main()
