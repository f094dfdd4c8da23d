"""Streaming throughput: ACP `session/update` notifications per second reaching a client.

  A  bridge: `agent-bridge acp demo` driven by a raw NDJSON client in this process
     (initialize, session/new, then session/prompt `bench:N`); timed from writing the
     prompt to reading the prompt's response; rate = N / elapsed.
  B  ceiling: bench/peers/ceiling_relay.py, a plain trio relay that decodes and
     re-encodes every line with msgspec and writes once per read; fed N copies of a
     real update line captured from the bridge in this run (identical bytes); timed
     from the first byte written to the N-th line read back; rate = N / elapsed.

Both clients read stdout in 1 MiB reads and count lines in bulk. Rounds are
interleaved (A, B, A, B, ...) with a fresh process per round; medians are reported
with the ratio A / B. Also reported: the bridge's peak RSS (VmHWM) and the CPU
time each process spent per event during the timed window.

Goal: bridge ≥ 0.5 × ceiling. If missed (or with --profile) one longer bridge turn
is profiled and the top functions printed: with py-spy (sampling, attached to the
stock process) if it is installed (`.venv/bin/pip install py-spy`), else with
cProfile (deterministic; inflates per-call costs, so read its shares loosely).

    .venv/bin/python bench/acp_stream.py                       # N=200000, 15 rounds, ~25 s
    .venv/bin/python bench/acp_stream.py --rounds 15 -n 500000 # longer
    .venv/bin/python bench/acp_stream.py --ceiling-codec dict  # dict-based ceiling
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import close_process, PEERS, PYTHON, REPO, bridge_cmd, clean_env, median, table  # noqa: E402

GOAL = 0.5
READ = 1 << 20
UPDATE = b'"session/update"'
CHUNK = b'"agent_message_chunk"'
CLK = os.sysconf("SC_CLK_TCK")


def enc(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (0 if unavailable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Proc:
    """A spawned peer with pipes, a raw reader over its stdout, and line helpers."""

    def __init__(self, cmd: list[str]) -> None:
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, bufsize=0, env=clean_env(), cwd=REPO
        )
        self.wfd = self.p.stdin.fileno()  # type: ignore[union-attr]
        self.rfd = self.p.stdout.fileno()  # type: ignore[union-attr]
        self.tail = b""

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]

    def read_line(self) -> bytes:
        while b"\n" not in self.tail:
            data = os.read(self.rfd, READ)
            if not data:
                raise RuntimeError(f"peer closed stdout; stderr:\n{self.stderr()}")
            self.tail += data
        line, self.tail = self.tail.split(b"\n", 1)
        return line

    def response(self, rid: int) -> dict[str, Any]:
        while True:
            msg = json.loads(self.read_line())
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"request {rid} failed: {msg['error']}")
                return msg["result"]

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-3000:].decode(errors="replace")

    def close(self) -> None:
        close_process(self.p, self.err)


def open_bridge_session(state: str) -> tuple[Proc, str]:
    b = Proc([*bridge_cmd(), "--state-dir", state])
    b.write(enc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
    b.response(1)
    b.write(enc({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(REPO), "mcpServers": []}}))
    return b, b.response(2)["sessionId"]


def prompt_msg(sid: str, n: int, rid: int = 3) -> bytes:
    return enc({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": f"bench:{n}"}]}})


def capture_update_line() -> bytes:
    """One real agent_message_chunk session/update line, exactly as the bridge writes it."""
    state = tempfile.mkdtemp(prefix="bench-stream-")
    b, sid = open_bridge_session(state)
    try:
        b.write(prompt_msg(sid, 1))
        while True:
            line = b.read_line()
            if CHUNK in line and UPDATE in line:
                return line + b"\n"
    finally:
        b.close()
        shutil.rmtree(state, ignore_errors=True)


def bridge_round(n: int) -> dict[str, float]:
    state = tempfile.mkdtemp(prefix="bench-stream-")
    b, sid = open_bridge_session(state)
    try:
        msg = prompt_msg(sid, n)
        updates = chunks = 0
        done = False
        cpu0 = cpu_seconds(b.p.pid)
        t0 = time.perf_counter()
        b.write(msg)
        tail, b.tail = b.tail, b""
        while not done:
            data = os.read(b.rfd, READ)
            if not data:
                raise RuntimeError(f"bridge closed stdout mid-turn; stderr:\n{b.stderr()}")
            buf = tail + data if tail else data
            cut = buf.rfind(b"\n") + 1
            tail, complete = buf[cut:], buf[:cut]
            u = complete.count(UPDATE)
            updates += u
            chunks += complete.count(CHUNK)
            if complete.count(b"\n") != u:  # some line is not an update: maybe our response
                for line in complete.split(b"\n"):
                    if line and UPDATE not in line:
                        m = json.loads(line)
                        if m.get("id") == 3:
                            if "error" in m:
                                raise RuntimeError(f"prompt failed: {m['error']}")
                            done = True
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(b.p.pid) - cpu0
        rss = peak_rss_kib(b.p.pid)
        if chunks != n:
            raise RuntimeError(f"bridge sent {chunks} agent_message_chunk updates, expected {n}")
        return {"rate": n / elapsed, "elapsed": elapsed, "updates": updates, "cpu_us": cpu / n * 1e6, "rss_kib": rss}
    finally:
        b.close()
        shutil.rmtree(state, ignore_errors=True)


def ceiling_round(n: int, line: bytes, codec: str) -> dict[str, float]:
    r = Proc([PYTHON, str(PEERS / "ceiling_relay.py"), *(["--dict"] if codec == "dict" else [])])
    try:
        # Ready check (keeps its start-up out of the timing) and byte-identity check.
        r.write(line)
        echoed = r.read_line() + b"\n"
        if echoed != line:
            print(f"warning: ceiling relay changes the line:\n  in:  {line!r}\n  out: {echoed!r}", file=sys.stderr)
        payload = line * n
        expect = len(line) * n
        got = len(r.tail)
        cpu0 = cpu_seconds(r.p.pid)
        t0 = time.perf_counter()
        feeder = threading.Thread(target=r.write, args=(payload,), daemon=True)
        feeder.start()
        while got < expect:
            data = os.read(r.rfd, READ)
            if not data:
                raise RuntimeError(f"relay closed stdout; stderr:\n{r.stderr()}")
            got += len(data)
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(r.p.pid) - cpu0
        feeder.join()
        return {"rate": n / elapsed, "elapsed": elapsed, "cpu_us": cpu / n * 1e6, "rss_kib": peak_rss_kib(r.p.pid)}
    finally:
        r.close()


def find_py_spy() -> str | None:
    here = os.path.join(os.path.dirname(PYTHON), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


def profile_bridge_py_spy(spy: str, n: int, top: int) -> bool:
    """Sample the stock bridge with py-spy (attached, non-blocking, GIL holder only) during one turn."""
    raw = tempfile.mktemp(prefix="bench-stream-", suffix=".txt")
    state = tempfile.mkdtemp(prefix="bench-stream-prof-")
    b, sid = open_bridge_session(state)
    try:
        rec = subprocess.Popen(
            [spy, "record", "--pid", str(b.p.pid), "--rate", "1000", "--nonblocking", "--gil", "--format", "raw", "--output", raw],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # let it attach
        if rec.poll() is not None:
            print(f"\npy-spy could not attach ({rec.stderr.read().decode(errors='replace').strip()[-300:]}); using cProfile")  # type: ignore[union-attr]
            return False
        t0 = time.perf_counter()
        b.write(prompt_msg(sid, n))
        b.response(3)
        elapsed = time.perf_counter() - t0
        rec.send_signal(signal.SIGINT)
        try:
            rec.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            rec.kill()
            rec.communicate()
    finally:
        b.close()
        shutil.rmtree(state, ignore_errors=True)
    if not os.path.exists(raw):
        print("\npy-spy wrote no profile; using cProfile")
        return False
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit():
                continue
            c = int(count)
            total += c
            names = [_frame_name(fr) for fr in stack.split(";")]
            own[names[-1]] = own.get(names[-1], 0) + c
            for name in set(names):
                incl[name] = incl.get(name, 0) + c
    os.unlink(raw)
    print(f"\npy-spy profile of the bridge: one bench:{n} turn ({n / elapsed:,.0f} updates/s while sampled; {total} samples, GIL holder only)")
    print("(own time of a Python function includes the C code it calls, e.g. msgspec's encoder)")
    print(table(["function (by own samples)", "own", "inclusive"], [[k, f"{v / total:.1%}", f"{incl[k] / total:.1%}"] for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:top]]))
    return True


def _frame_name(frame: str) -> str:
    fn, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    path = path.split("site-packages/")[-1]
    if path.startswith(str(REPO) + "/"):
        path = path[len(str(REPO)) + 1 :]
    return f"{fn} ({path})" if where else fn


def profile_bridge(n: int, top: int, profiler: str) -> None:
    if profiler != "cprofile":
        spy = find_py_spy()
        if spy and profile_bridge_py_spy(spy, n, top):
            return
        if profiler == "py-spy":
            print("\npy-spy not available (`.venv/bin/pip install py-spy`); using cProfile")
    profile_bridge_cprofile(n, top)


def profile_bridge_cprofile(n: int, top: int) -> None:
    """Run the bridge once under cProfile with a scripted client; print the top functions."""
    prof = tempfile.mktemp(prefix="bench-stream-", suffix=".prof")
    state = tempfile.mkdtemp(prefix="bench-stream-prof-")
    b = Proc([PYTHON, "-m", "cProfile", "-o", prof, "-m", "bridge", "acp", "demo", "--state-dir", state])
    try:
        b.write(enc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))
        b.response(1)
        b.write(enc({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(REPO), "mcpServers": []}}))
        sid = b.response(2)["sessionId"]
        t0 = time.perf_counter()
        b.write(prompt_msg(sid, n))
        b.response(3)
        elapsed = time.perf_counter() - t0
    finally:
        b.close()
        shutil.rmtree(state, ignore_errors=True)
    print(f"\ncProfile of the bridge: one bench:{n} turn ({n / elapsed:,.0f} updates/s under the profiler)")
    st = pstats.Stats(prof)
    os.unlink(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    out = []
    for (file, lineno, fn), (_cc, nc, tt, ct, _callers) in rows:
        where = f"{os.path.relpath(file, REPO) if file.startswith(str(REPO)) else os.path.basename(file)}:{lineno}({fn})"
        out.append([where[-70:], str(nc), f"{tt:.3f}", f"{tt / total:.0%}", f"{ct:.3f}"])
    print(table(["function (by own time)", "calls", "tottime s", "share", "cumtime s"], out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--events", type=int, default=200_000, help="updates per turn / lines per ceiling run (default 200000)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--ceiling-codec", choices=["struct", "dict"], default="struct", help="msgspec typed Structs (default) or dicts")
    ap.add_argument("--profile", action="store_true", help="cProfile the bridge even if the goal is met")
    ap.add_argument("--top", type=int, default=20, help="rows in the profile table")
    ap.add_argument("--profile-events", type=int, default=1_000_000, help="turn size for the profile run (default 1000000)")
    ap.add_argument(
        "--profiler", choices=["auto", "py-spy", "cprofile"], default="auto", help="auto: py-spy if installed in the venv or on PATH, else cProfile"
    )
    a = ap.parse_args()

    start = time.perf_counter()
    line = capture_update_line()
    bridge_round(min(a.events, 20_000))  # warm-up, not counted
    ceiling_round(min(a.events, 20_000), line, a.ceiling_codec)
    br: list[dict[str, float]] = []
    ce: list[dict[str, float]] = []
    for i in range(a.rounds):
        pair = [lambda: br.append(bridge_round(a.events)), lambda: ce.append(ceiling_round(a.events, line, a.ceiling_codec))]
        if i % 2:
            pair.reverse()
        for run in pair:
            run()
    took = time.perf_counter() - start

    def col(rs: list[dict[str, float]], k: str) -> list[float]:
        return [r[k] for r in rs]

    b_rate, c_rate = median(col(br, "rate")), median(col(ce, "rate"))
    ratio = b_rate / c_rate
    print(f"ACP streaming: N={a.events:,} updates per run, {a.rounds} interleaved rounds ({took:.0f} s)")
    print(f"update line ({len(line)} bytes): {line.decode().strip()}\n")
    rows = []
    for label, rs in (("bridge (acp demo, bench:N)", br), (f"ceiling (trio relay, msgspec {a.ceiling_codec})", ce)):
        rates = col(rs, "rate")
        rows.append(
            [
                label,
                f"{median(rates):,.0f}",
                f"{min(rates):,.0f}",
                f"{max(rates):,.0f}",
                f"{median(col(rs, 'elapsed')) * 1000:.0f}",
                f"{median(col(rs, 'cpu_us')):.2f}",
                f"{max(col(rs, 'rss_kib')) / 1024:.1f}",
            ]
        )
    print(table(["process", "median /s", "min /s", "max /s", "median ms", "cpu µs/event", "peak RSS MiB"], rows))
    extra = {int(r["updates"]) - a.events for r in br}
    print(f"(session/update lines seen during the bridge's turn beyond the N chunks: {sorted(extra)})")
    print(f"\nRATIO bridge/ceiling (median rates) = {ratio:.3f}")
    met = ratio >= GOAL
    print(f"VERDICT: {'PASS' if met else 'FAIL'} — bridge streams at {ratio:.2f}× the relay ceiling; goal ≥ {GOAL}×")
    if not met or a.profile:
        profile_bridge(a.profile_events, a.top, a.profiler)


if __name__ == "__main__":
    main()
