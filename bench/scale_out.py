"""Past one process (issue 17): what `--workers 2` and a PostgreSQL store give and cost, one run.

A throwaway PostgreSQL server (tests/pg_support.py: initdb in a temp dir, a unix socket)
and real `agent-bridge serve` processes (demo back, `chunk_delay_s = 0`), called through
the protocols' public surfaces only:

(a) throughput, one process vs `serve --workers 2`, both on PostgreSQL: --clients /ws
    clients each running chat turns (`chat:send` .. `chat:end`, each in a session of its
    own made by `POST /api/sessions`) for --seconds, then as many A2A clients sending
    blocking contextless `SendMessage` for --seconds. Goal: each ≥ 1.6× with 2 workers.
    Clients reach whichever worker accepts, as behind any load balancer: a /ws turn may
    be forwarded to the worker owning its session.
(b) cost, one process on SQLite vs one on PostgreSQL: the daemon's CPU time per /ws turn
    and per A2A SendMessage over the same load as (a). Goal: PostgreSQL ≤ 1.5× SQLite.
(c) delivery across instances: two daemons A and B on one database; a session made on A
    (A holds its lease), two /ws subscribers on A and one on B; --turns turns sent on A.
    For every event, the time the subscriber on B saw it after the first subscriber on A,
    against the second subscriber on A (same-instance delivery). Goal: p50 added < 5 ms.

Throughput is counted over the whole window by the clients in this process; CPU is the
daemon's (its workers' summed), from /proc/PID/task/*/schedstat.

    .venv/bin/python bench/scale_out.py --quick    # 3 s windows, 50 turns: a smoke run
    .venv/bin/python bench/scale_out.py            # 10 s windows, 300 turns, ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import PYTHON, clean_env, median, pct, table  # noqa: E402
from _wire import A2A_HEADERS, MAX_MESSAGE, Http, a2a_result, cpu_ns, cpu_spent, frame, idle, send_body, until_frame  # noqa: E402
from pg_support import PgServer  # noqa: E402

GOAL_WORKERS = 1.6  # (a): 2 workers ÷ 1 process, at least
GOAL_PG_CPU = 1.5  # (b): PostgreSQL ÷ SQLite CPU per call, at most
GOAL_ADDED_MS = 5.0  # (c): p50 added by crossing instances, under
A2A = "/a2a/demo"


class Daemon:
    """One `agent-bridge serve` (a supervisor and its workers with `workers` > 1)."""

    def __init__(self, name: str, tmp: Path, *, url: str | None, workers: int = 1) -> None:
        self.name, self.dir, self.workers = name, tmp / name, workers
        self.dir.mkdir()
        store = f'[store]\nurl = "{url}"\n' if url else ""
        (self.dir / "bench.toml").write_text(
            'default_route = "demo"\nlog_level = "warning"\n'
            '[routes.demo]\nback = { kind = "demo", chunk_delay_s = 0.0 }\n'
            '[server]\nlisten = "127.0.0.1:0"\ngraceful_timeout_s = 1\n'
            "[daemon]\nacp_socket = false\nmax_live_sessions = 4000\nmetrics = false\n"
            "[ws]\nmax_messages_per_s = 1000000.0\nmessage_burst = 1000000\n" + store
        )
        self.proc: trio.Process | None = None
        self.port = 0
        self.extra: dict[str, tuple[float, float]] = {}  # kind -> (PostgreSQL server CPU s, this client's CPU s)

    async def start(self) -> None:
        exe = Path(PYTHON).with_name("agent-bridge")
        cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "bridge"]
        cmd += ["serve", "--config", str(self.dir / "bench.toml"), "--state-dir", str(self.dir / "state")]
        if self.workers > 1:
            cmd += ["--workers", str(self.workers)]
        with open(self.dir / "daemon.log", "wb") as log:
            self.proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=log, env=clean_env())
        buf = b""
        with trio.fail_after(60):
            while b"\n" not in buf:
                chunk = await self.proc.stdout.receive_some()  # type: ignore[union-attr]
                if not chunk:
                    raise SystemExit(f"the {self.name} daemon did not start: {self.log_tail()}")
                buf += chunk
        self.port = int(buf.split()[1].rsplit(b":", 1)[1])
        for pid in self.pids():
            await idle(pid, window=0.25, limit=30)  # imports in worker threads after listening

    def log_tail(self) -> str:
        log = self.dir / "daemon.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else "(not started)"

    def pids(self) -> list[int]:
        """The serving processes: the daemon, or the supervisor's workers."""
        assert self.proc is not None
        if self.workers == 1:
            return [self.proc.pid]
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        if int(f.read().rsplit(b")", 1)[1].split()[1]) == self.proc.pid:
                            found.append(int(entry))
                except (OSError, IndexError, ValueError):
                    pass
        return found

    def cpu(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pid in [*self.pids(), *([self.proc.pid] if self.proc and self.workers > 1 else [])]:
            out.update(cpu_ns(pid))
        return out

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        with trio.move_on_after(30):
            await self.proc.wait()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


# -- load -----------------------------------------------------------------------------------


def server_cpu() -> dict[str, int]:
    """CPU of every PostgreSQL server process (the bench's throwaway cluster is the only one)."""
    out: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == "postgres":
                        out.update(cpu_ns(int(entry)))
            except OSError:
                pass
    return out


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
local n = 0
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"wrk-' .. n .. '-' .. math.random(1000000000) .. '","role":"ROLE_USER","parts":[{"text":"hello"}]}}}'
  return wrk.format(nil, nil, nil, body)
end
local bad = 0
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, "TASK_STATE_COMPLETED", 1, true) then bad = bad + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("\\nWRK %d %d\\n", summary.requests, bad))
end
"""


async def ws_turns(d: Daemon, clients: int, seconds: float) -> tuple[int, float]:
    """(turns ended, daemon CPU seconds) with `clients` /ws clients for `seconds`."""
    async with Http.opened(d.port) as http:
        sids = [(await http.json("POST", "/api/sessions", {"route": "demo"}))["session_id"] for _ in range(clients)]
    done = 0
    stop_at = trio.current_time() + seconds
    c0, s0, k0 = d.cpu(), server_cpu(), own_cpu()

    async def client(sid: str) -> None:
        nonlocal done
        async with open_websocket_url(d.ws_url, max_message_size=MAX_MESSAGE) as ws:
            await ws.send_message(frame("session:subscribe", session_id=sid))
            await until_frame(ws, "session:subscribed")
            while trio.current_time() < stop_at:
                await ws.send_message(frame("chat:send", session_id=sid, message="hello"))
                await until_frame(ws, "chat:end")
                done += 1

    async with trio.open_nursery() as nursery:
        for sid in sids:
            nursery.start_soon(client, sid)
    d.extra["ws"] = (cpu_spent(s0, server_cpu()), own_cpu() - k0)
    return done, cpu_spent(c0, d.cpu())


async def a2a_sends(d: Daemon, clients: int, seconds: float) -> tuple[int, float]:
    """(SendMessage answered, daemon CPU seconds) with `clients` HTTP clients for `seconds`:
    wrk (Debian's `wrk`, C: a small fraction of a core) when installed, so the load
    generator does not take the cores the daemon is measured on; else clients in Python."""
    if shutil.which("wrk"):
        return await a2a_sends_wrk(d, clients, seconds)
    done = 0
    stop_at = trio.current_time() + seconds
    c0, s0, k0 = d.cpu(), server_cpu(), own_cpu()

    async def client() -> None:
        nonlocal done
        async with Http.opened(d.port) as http:
            while trio.current_time() < stop_at:
                task = a2a_result(*await http.request("POST", A2A, send_body(), A2A_HEADERS))["task"]
                assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
                done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(client)
    d.extra["a2a"] = (cpu_spent(s0, server_cpu()), own_cpu() - k0)
    return done, cpu_spent(c0, d.cpu())


async def a2a_sends_wrk(d: Daemon, clients: int, seconds: float) -> tuple[int, float]:
    script = d.dir / "send.lua"
    script.write_text(WRK_SCRIPT)
    c0, s0 = d.cpu(), server_cpu()
    cmd = ["wrk", "-t1", f"-c{clients}", f"-d{max(1, round(seconds))}s", "-s", str(script), f"http://127.0.0.1:{d.port}{A2A}"]
    proc = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
    cpu = cpu_spent(c0, d.cpu())
    words = proc.stdout.decode().split("WRK ")[-1].split()
    if proc.returncode != 0 or len(words) < 2:
        raise SystemExit(f"wrk failed: {proc.stdout.decode()[-500:]} {proc.stderr.decode()[-500:]}")
    done, bad = int(words[0]), int(words[1])
    if bad:
        raise SystemExit(f"{bad} of {done} SendMessage were not answered COMPLETED")
    d.extra["a2a"] = (cpu_spent(s0, server_cpu()), proc_cpu_of(proc))
    return done, cpu


def proc_cpu_of(proc: object) -> float:
    return 0.0  # wrk's own CPU is not the bench's: it ran in its own process (a few % of a core)


async def load(d: Daemon, args: argparse.Namespace) -> dict[str, tuple[int, float]]:
    await d.start()
    try:
        out = {"ws": await ws_turns(d, args.clients, args.seconds)}
        for pid in d.pids():
            await idle(pid, window=0.25, limit=30)
        out["a2a"] = await a2a_sends(d, args.clients, args.seconds)
    finally:
        await d.stop()
    ws, a2a = out["ws"], out["a2a"]
    (ws_pg, ws_client), (a2a_pg, _) = d.extra["ws"], d.extra["a2a"]
    print(f"[{d.name}] /ws {ws[0] / args.seconds:,.0f} turns/s ({ws[1] / max(ws[0], 1) * 1e3:.2f} ms daemon CPU a turn, "
          f"+{ws_pg / max(ws[0], 1) * 1e3:.2f} ms PostgreSQL's, +{ws_client / max(ws[0], 1) * 1e3:.2f} ms the bench client's); "
          f"A2A {a2a[0] / args.seconds:,.0f} SendMessage/s ({a2a[1] / max(a2a[0], 1) * 1e3:.2f} ms daemon CPU each, "
          f"+{a2a_pg / max(a2a[0], 1) * 1e3:.2f} ms PostgreSQL's; load from {'wrk' if shutil.which('wrk') else 'Python clients'})",
          flush=True)  # fmt: skip
    return out


# -- (c) delivery across instances ------------------------------------------------------------


async def cross_instance(a: Daemon, b: Daemon, turns: int) -> tuple[list[float], list[float]]:
    """Per event: (B's subscriber − A's first, A's second − A's first), in seconds."""
    async with Http.opened(a.port) as http:
        sid = (await http.json("POST", "/api/sessions", {"route": "demo"}))["session_id"]
    seen: dict[str, dict[int, float]] = {"a1": {}, "a2": {}, "b": {}}
    ended = {name: 0 for name in seen}
    all_ended = trio.Event()

    async def subscriber(name: str, d: Daemon, ready: trio.Event, *, driver: bool = False) -> None:
        async with open_websocket_url(d.ws_url, max_message_size=MAX_MESSAGE) as ws:
            await ws.send_message(frame("session:subscribe", session_id=sid))
            await until_frame(ws, "session:subscribed")
            ready.set()
            while ended[name] < turns:
                m = await ws.get_message()
                at = time.perf_counter()
                data = json.loads(m)
                if data.get("event") == "system:error":
                    raise SystemExit(f"/ws on {d.name}: {m[:300]}")
                sequence = (data.get("data") or {}).get("sequence")
                if isinstance(sequence, int):
                    seen[name].setdefault(sequence, at)
                if data.get("event") == "chat:end":
                    ended[name] += 1
            if all(n >= turns for n in ended.values()):
                all_ended.set()
            await all_ended.wait()

    async def driver() -> None:
        async with open_websocket_url(a.ws_url, max_message_size=MAX_MESSAGE) as ws:
            for _ in range(turns):
                await ws.send_message(frame("chat:send", session_id=sid, message="hello"))
                await until_frame(ws, "chat:end")

    async with trio.open_nursery() as nursery:
        for name, d in (("a1", a), ("a2", a), ("b", b)):
            ready = trio.Event()
            nursery.start_soon(subscriber, name, d, ready)
            await ready.wait()
        nursery.start_soon(driver)
    common = set(seen["a1"]) & set(seen["a2"]) & set(seen["b"])
    cross = [seen["b"][s] - seen["a1"][s] for s in sorted(common)]
    same = [seen["a2"][s] - seen["a1"][s] for s in sorted(common)]
    return cross, same


# -- the run ----------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


async def run(args: argparse.Namespace, tmp: Path) -> int:
    pg = PgServer()
    await trio.to_thread.run_sync(pg.start)
    daemons: list[Daemon] = []
    try:
        one = Daemon("pg-1", tmp, url=pg.fresh_db())
        two = Daemon("pg-workers-2", tmp, url=pg.fresh_db(), workers=2)
        lite = Daemon("sqlite-1", tmp, url=None)
        daemons = [one, two, lite]
        results = {d.name: await load(d, args) for d in daemons}
        a = Daemon("pg-a", tmp, url=(shared := pg.fresh_db()))
        b = Daemon("pg-b", tmp, url=shared)
        daemons += [a, b]
        await a.start()
        await b.start()
        cross, same = await cross_instance(a, b, args.turns)
        await a.stop()
        await b.stop()
    except BaseException:
        for d in daemons:
            print(f"--- the {d.name} daemon's log, last lines:\n{d.log_tail()}", file=sys.stderr)
        raise
    finally:
        for d in daemons:
            await d.stop()
        await trio.to_thread.run_sync(pg.stop)

    rows, ok = [], True

    def judge(label: str, reference: str, measured: str, ratio: float, passed: bool, goal: str) -> None:
        nonlocal ok
        ok = ok and passed
        rows.append([label, reference, measured, f"{ratio:.2f}", goal, "PASS" if passed else "FAIL"])

    s = args.seconds
    for kind, unit in (("ws", "/ws turns/s"), ("a2a", "A2A SendMessage/s")):
        r1, r2 = results[one.name][kind][0] / s, results[two.name][kind][0] / s
        judge(f"{unit}: 1 process -> --workers 2 (PostgreSQL)", f"{r1:,.0f}", f"{r2:,.0f}", r2 / r1, r2 / r1 >= GOAL_WORKERS, f">= {GOAL_WORKERS}")
    for kind, unit in (("ws", "CPU per /ws turn"), ("a2a", "CPU per A2A SendMessage")):
        (n_l, c_l), (n_p, c_p) = results[lite.name][kind], results[one.name][kind]
        per_l, per_p = c_l / max(n_l, 1), c_p / max(n_p, 1)
        judge(f"{unit}: SQLite -> PostgreSQL", _ms(per_l), _ms(per_p), per_p / per_l, per_p / per_l <= GOAL_PG_CPU, f"<= {GOAL_PG_CPU}")
        with_server = per_p + one.extra[kind][0] / max(n_p, 1)
        judge(f"{unit}: SQLite -> PostgreSQL, its server's CPU too", _ms(per_l), _ms(with_server), with_server / per_l,
              with_server / per_l <= GOAL_PG_CPU, f"<= {GOAL_PG_CPU}")  # fmt: skip
    added = median(cross) - median(same)
    rows.append(["/ws event, p50: 2nd subscriber on A -> subscriber on B", _ms(median(same)), _ms(median(cross)), "-",
                 f"+{GOAL_ADDED_MS:g} ms", "PASS" if added < GOAL_ADDED_MS / 1e3 else "FAIL"])  # fmt: skip
    ok = ok and added < GOAL_ADDED_MS / 1e3
    print(f"\n{args.seconds:g} s windows, {args.clients} clients; (c) over {len(cross)} events of {args.turns} turns "
          f"(p99 same {_ms(pct(same, 99))}, across {_ms(pct(cross, 99))})")  # fmt: skip
    print(table(["what: reference -> measured", "reference", "measured", "ratio", "goal", "verdict"], rows))
    (n1, c1), (pg1, cl1) = results[one.name]["ws"], one.extra["ws"]
    whole = (c1 + pg1 + cl1) / max(n1, 1)
    print(f"\n/ws, one process: daemon + PostgreSQL + this bench's own clients spend {whole * 1e3:.2f} ms of CPU a turn, "
          f"so this {os.cpu_count()}-core machine tops out near {os.cpu_count() / whole:,.0f} turns/s whatever serves them; "
          f"the daemons' share: {(c1 / max(n1, 1)) * 1e3:.2f} ms a turn with one process, "
          f"{results[two.name]['ws'][1] / max(results[two.name]['ws'][0], 1) * 1e3:.2f} ms with two workers")  # fmt: skip
    print(f"\nADDED across instances, p50: {added * 1e3:.2f} ms (goal < {GOAL_ADDED_MS:g} ms)")
    print(f"VERDICT: {'PASS' if ok else 'FAIL'}; load average {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=10, help="concurrent clients in (a) and (b) (default 10)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each throughput window (default 10)")
    ap.add_argument("--turns", type=int, default=300, help="turns sent in (c) (default 300)")
    ap.add_argument("--quick", action="store_true", help="3 s windows and 50 turns: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.turns = 3.0, 50
    with tempfile.TemporaryDirectory(prefix="scale-out-bench-") as tmp:
        os.chmod(tmp, 0o755)
        sys.exit(trio.run(run, args, Path(tmp)))


if __name__ == "__main__":
    main()
