"""What an idle live session costs, and what bringing a closed one back costs.

The figures behind `[daemon] idle_session_close_s` and `[daemon] max_idle_sessions`
(README.md, configuration). For each back, on `agent-bridge serve`:

  idle   N sessions, each created (REST) and run one turn by a /ws client that then
         leaves; the daemon's RSS growth per session, its trio tasks per session, and
         (ACP back) the RSS of the agent process each session keeps.
  warm   a client subscribes to a live session that ran a turn and sends a prompt:
         subscribe → first `turn:patch`, median of the samples.
  cold   the same on a session the daemon closed (`[daemon] idle_session_close_s = 1`
         in this run): the session comes back from the store (`SessionManager.get`,
         its history replayed to the stream), and the ACP back spawns its agent again
         (`initialize`, `session/load`).

Backs: the demo back, and the ACP back spawning tests/peers/acp_agent_sdk.py (an agent
on the official ACP Python SDK, as light as a real agent gets).

    .venv/bin/python bench/session_cache.py              # ~1 min
    .venv/bin/python bench/session_cache.py --sessions 500 --acp-sessions 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, REPO, clean_env, table  # noqa: E402

AGENT = [PYTHON, str(REPO / "tests" / "peers" / "acp_agent_sdk.py")]


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return out


def start_daemon(tmp: str, *, idle_close_s: float) -> tuple[subprocess.Popen[str], str]:
    config = os.path.join(tmp, "bridge.toml")
    with open(config, "w") as f:
        f.write(
            "\n".join(
                [
                    'log_level = "warning"',
                    "[routes.demo]",
                    'back = { kind = "demo", chunk_delay_s = 0.0 }',
                    "[routes.acp]",
                    f"back = {{ kind = \"acp\", command = {json.dumps(AGENT)} }}",
                    "[server]",
                    'listen = "127.0.0.1:0"',
                    "graceful_timeout_s = 1",
                    "[daemon]",
                    "acp_socket = false",
                    f"idle_session_close_s = {idle_close_s}",
                    "max_idle_sessions = 100000",
                    "max_live_sessions = 100000",
                    "",
                ]
            )
        )
    exe = os.path.join(os.path.dirname(PYTHON), "agent-bridge")
    cmd = [exe] if os.path.exists(exe) else [PYTHON, "-m", "bridge"]
    proc = subprocess.Popen(
        [*cmd, "serve", "--config", config, "--state-dir", os.path.join(tmp, "state")],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(tmp, "daemon.log"), "w"),  # noqa: SIM115 (open for the process's life)
        text=True,
        env=clean_env(),
        cwd=REPO,
    )
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line.startswith("listening "):
        raise SystemExit(f"the daemon did not start: {line!r}; see {tmp}/daemon.log")
    return proc, line.split()[1]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def frame(event: str, **data: Any) -> str:
    return json.dumps({"event": event, "data": data})


async def live_sessions(h: httpx.AsyncClient) -> int:
    text = (await h.get("/metrics")).text
    return sum(int(float(ln.split()[-1])) for ln in text.splitlines() if ln.startswith("agent_bridge_sessions_live{"))


async def turn(url: str, sid: str, prompt: str) -> float:
    """Subscribe, send, read to `chat:end`; returns subscribe → first `turn:patch` in s."""
    async with open_websocket_url(url.replace("http", "ws") + "/ws") as ws:
        t0 = time.perf_counter()
        await ws.send_message(frame("session:subscribe", session_id=sid))
        await ws.send_message(frame("chat:send", session_id=sid, message=prompt))
        first = None
        while True:
            m = await ws.get_message()
            if first is None and '"turn:patch"' in m[:24]:
                first = time.perf_counter() - t0
            if '"chat:end"' in m[:24]:
                assert '"completed"' in m, m
                break
            if '"system:error"' in m[:24]:
                raise RuntimeError(m)
    assert first is not None
    return first


async def idle_cost(url: str, pid: int, route: str, n: int, prompt: str) -> tuple[list[str], float, float]:
    """N sessions that ran one turn and were left: (their ids, daemon KiB each, agent KiB each)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as h:
        sids = [(await h.post("/api/sessions", json={"route": route})).json()["session_id"] for _ in range(2)]
        for sid in sids:  # warm-up: first-use costs not counted
            await turn(url, sid, prompt)
        await trio.sleep(0.5)
        before, agents_before = rss_kib(pid), sum(rss_kib(c) for c in children(pid))
        ids = [(await h.post("/api/sessions", json={"route": route})).json()["session_id"] for _ in range(n)]
        limiter = trio.CapacityLimiter(20)

        async def one(sid: str) -> None:
            async with limiter:
                await turn(url, sid, prompt)

        async with trio.open_nursery() as nursery:
            for sid in ids:
                nursery.start_soon(one, sid)
        await trio.sleep(1.0)
        after, agents_after = rss_kib(pid), sum(rss_kib(c) for c in children(pid))
    return sids + ids, (after - before) / n, (agents_after - agents_before) / n


async def cold(url: str, route: str, prompt: str, samples: int) -> list[float]:
    """Sessions that ran a turn and were closed (`idle_session_close_s`), asked for again."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as h:
        ids = [(await h.post("/api/sessions", json={"route": route})).json()["session_id"] for _ in range(samples)]
        for sid in ids:
            await turn(url, sid, prompt)
        while await live_sessions(h) > 0:  # each idle for idle_session_close_s: closed
            await trio.sleep(0.5)
    return [await turn(url, sid, prompt) for sid in ids]


async def run(args: argparse.Namespace, tmp: str) -> None:
    rows = []
    for route, n, prompt in (("demo", args.sessions, "hello"), ("acp", args.acp_sessions, "text:3")):
        daemon, url = start_daemon(os.path.join(tmp, route), idle_close_s=3600)
        try:
            sids, kib, agent_kib = await idle_cost(url, daemon.pid, route, n, prompt)
            warm = [await turn(url, sid, prompt) for sid in sids[: args.samples]]  # live, agent running
        finally:
            stop(daemon)
        daemon, url = start_daemon(os.path.join(tmp, route + "-cold"), idle_close_s=1)
        try:
            back = await cold(url, route, prompt, args.samples)
        finally:
            stop(daemon)
        ms = lambda xs: f"{statistics.median(xs) * 1e3:.1f}"  # noqa: E731
        rows.append([route, f"{kib:.1f}", f"{agent_kib / 1024:.1f}" if agent_kib else "-", ms(warm), ms(back)])
    print(f"\nidle live session after one turn ({args.sessions} demo, {args.acp_sessions} ACP sessions); "
          f"subscribe → first patch, median of {args.samples}")
    print(table(["back", "daemon KiB/session", "agent MiB/session", "warm ms", "cold ms (from the store)"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000, help="demo sessions for the idle cost (default 1000)")
    ap.add_argument("--acp-sessions", type=int, default=30, help="ACP sessions (one agent process each; default 30)")
    ap.add_argument("--samples", type=int, default=10, help="warm and cold samples (default 10)")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    with tempfile.TemporaryDirectory(prefix="session-cache-") as tmp:
        for sub in ("demo", "demo-cold", "acp", "acp-cold"):
            os.makedirs(os.path.join(tmp, sub))
        trio.run(run, args, tmp)


if __name__ == "__main__":
    main()
