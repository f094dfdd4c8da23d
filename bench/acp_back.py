"""The ACP back: an ACP client → bridge → ACP agent, beside the same client → same agent.

For each agent, in one run, with rounds interleaved (direct, bridge, direct, ...):

  throughput  the client sends session/prompt `bench:N`; the agent streams N
              agent_message_chunk updates as fast as it can; timed from writing the
              prompt to reading its response; rate = N / elapsed.
  latency     `pace:N:MS`: the agent sends one update every MS ms whose text is its
              CLOCK_MONOTONIC time in ns; the client subtracts it from the time it
              read the line. Added latency = median(bridge) − median(direct).

  direct  the client spawns the agent itself.
  bridge  the client spawns `agent-bridge acp bench --config <tmp>` whose route is
          `back = { kind = "acp", command = <the same agent> }`; the bridge spawns the
          agent. A warm-up prompt first, so no start-up is timed on either side.

Agents: the scriptable agent on the official ACP Python SDK (tests/peers/acp_agent_sdk.py,
a real agent's pace) and a raw stdlib agent (bench/peers/acp_agent_raw.py) that writes
pre-encoded lines in batches: a stress test showing the bridge's own ceiling.

Goals (issue 4): added median latency per update < 1 ms; throughput ≥ 0.8 × direct.

    .venv/bin/python bench/acp_back.py                 # both agents, 5 rounds
    .venv/bin/python bench/acp_back.py --agent sdk -n 20000 --rounds 7
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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import close_process, PEERS, PYTHON, REPO, clean_env, median, pct, table  # noqa: E402

READ = 1 << 20
CHUNK = b'"agent_message_chunk"'
AGENTS = {
    "sdk": ([PYTHON, str(REPO / "tests" / "peers" / "acp_agent_sdk.py")], "ACP Python SDK agent"),
    "raw": ([PYTHON, str(PEERS / "acp_agent_raw.py")], "raw stdlib agent (stress)"),
}
GOAL_RATIO = 0.8
GOAL_ADDED_MS = 1.0


def enc(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


class Peer:
    """A spawned ACP agent (or bridge) with a raw NDJSON client over its stdio."""

    def __init__(self, cmd: list[str], cwd: str) -> None:
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, bufsize=0, env=clean_env(), cwd=cwd)
        self.wfd = self.p.stdin.fileno()  # type: ignore[union-attr]
        self.rfd = self.p.stdout.fileno()  # type: ignore[union-attr]
        self.tail = b""
        self.next_id = 0
        self.sid = ""

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]

    def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.write(enc({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}))
        return self.next_id

    def read_lines(self) -> list[bytes]:
        data = os.read(self.rfd, READ)
        if not data:
            self.err.seek(0)
            raise RuntimeError(f"peer closed stdout; stderr:\n{self.err.read()[-3000:].decode(errors='replace')}")
        buf = self.tail + data
        cut = buf.rfind(b"\n") + 1
        self.tail = buf[cut:]
        return buf[:cut].split(b"\n")[:-1]

    def call(self, method: str, params: Any) -> Any:
        rid = self.request(method, params)
        while True:
            for line in self.read_lines():
                msg = json.loads(line)
                if msg.get("id") == rid and "method" not in msg:
                    if "error" in msg:
                        raise RuntimeError(f"{method} failed: {msg['error']}")
                    return msg["result"]

    def open(self) -> None:
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        self.sid = self.call("session/new", {"cwd": str(REPO), "mcpServers": []})["sessionId"]
        self.call("session/prompt", {"sessionId": self.sid, "prompt": [{"type": "text", "text": "bench:10"}]})  # warm-up

    def prompt(self, text: str) -> int:
        return self.request("session/prompt", {"sessionId": self.sid, "prompt": [{"type": "text", "text": text}]})

    def close(self) -> None:
        close_process(self.p, self.err)


def spawn(mode: str, agent: list[str], workdir: str) -> Peer:
    if mode == "direct":
        return Peer(agent, workdir)
    config = Path(workdir, "bench.toml")
    config.write_text(f'log_level = "warning"\n[routes.bench]\nback = {{ kind = "acp", command = {json.dumps(agent)} }}\n')
    exe = Path(PYTHON).with_name("agent-bridge")
    cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "bridge"]
    return Peer([*cmd, "acp", "bench", "--config", str(config), "--state-dir", str(Path(workdir, "state"))], workdir)


def throughput_round(mode: str, agent: list[str], n: int) -> float:
    workdir = tempfile.mkdtemp(prefix="bench-acp-back-")
    peer = spawn(mode, agent, workdir)
    try:
        peer.open()
        t0 = time.perf_counter()
        rid = peer.prompt(f"bench:{n}")
        chunks, done = 0, False
        end = b'"id":%d,' % rid
        while not done:
            lines = peer.read_lines()
            chunks += sum(line.count(CHUNK) for line in lines)
            for line in lines:
                if CHUNK not in line and (end in line or f'"id": {rid}'.encode() in line):
                    msg = json.loads(line)
                    if msg.get("id") == rid:
                        if "error" in msg:
                            raise RuntimeError(f"prompt failed: {msg['error']}")
                        done = True
        elapsed = time.perf_counter() - t0
        if chunks != n:
            raise RuntimeError(f"{mode}: {chunks} updates arrived, expected {n}")
        return n / elapsed
    finally:
        peer.close()
        shutil.rmtree(workdir, ignore_errors=True)


def latency_round(mode: str, agent: list[str], n: int, pause_ms: float) -> list[float]:
    workdir = tempfile.mkdtemp(prefix="bench-acp-back-")
    peer = spawn(mode, agent, workdir)
    try:
        peer.open()
        rid = peer.prompt(f"pace:{n}:{pause_ms}")
        out: list[float] = []
        while True:
            lines = peer.read_lines()
            now = time.monotonic_ns()
            for line in lines:
                i = line.find(b'"t=')
                if i >= 0:
                    out.append((now - int(line[i + 3 : line.index(b'"', i + 3)])) / 1e6)
                elif b'"stopReason"' in line and json.loads(line).get("id") == rid:
                    if len(out) != n:
                        raise RuntimeError(f"{mode}: {len(out)} paced updates, expected {n}")
                    return out
    finally:
        peer.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", choices=["sdk", "raw", "both"], default="both")
    ap.add_argument("-n", type=int, default=0, help="updates per throughput run (default: sdk 20000, raw 200000)")
    ap.add_argument("--paced", type=int, default=500, help="updates per latency run (default 500)")
    ap.add_argument("--pause-ms", type=float, default=2.0, help="pause between paced updates (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    a = ap.parse_args()
    start = time.perf_counter()
    verdicts = []
    for key in (["sdk", "raw"] if a.agent == "both" else [a.agent]):
        agent, label = AGENTS[key]
        n = a.n or (20_000 if key == "sdk" else 200_000)
        rates: dict[str, list[float]] = {"direct": [], "bridge": []}
        lat: dict[str, list[float]] = {"direct": [], "bridge": []}
        for i in range(a.rounds):
            order = ["direct", "bridge"] if i % 2 == 0 else ["bridge", "direct"]
            for mode in order:
                rates[mode].append(throughput_round(mode, agent, n))
            for mode in order:
                lat[mode] += latency_round(mode, agent, a.paced, a.pause_ms)
        ratio = median(rates["bridge"]) / median(rates["direct"])
        added = median(lat["bridge"]) - median(lat["direct"])
        print(f"\n{label}: throughput N={n:,} per run, latency {a.paced} updates every {a.pause_ms:g} ms per run, {a.rounds} interleaved rounds")
        rows = []
        for mode in ("direct", "bridge"):
            r, ls = rates[mode], lat[mode]
            rows.append([mode, f"{median(r):,.0f}", f"{min(r):,.0f}", f"{max(r):,.0f}",
                         f"{median(ls) * 1000:.0f}", f"{pct(ls, 90) * 1000:.0f}", f"{pct(ls, 99) * 1000:.0f}"])  # fmt: skip
        print(table(["path", "median upd/s", "min upd/s", "max upd/s", "p50 µs", "p90 µs", "p99 µs"], rows))
        ok_ratio, ok_added = ratio >= GOAL_RATIO, added < GOAL_ADDED_MS
        print(f"throughput bridge/direct = {ratio:.3f} (goal ≥ {GOAL_RATIO}) {'PASS' if ok_ratio else 'FAIL'}")
        print(f"added median latency per update = {added * 1000:.0f} µs (goal < {GOAL_ADDED_MS * 1000:.0f} µs) {'PASS' if ok_added else 'FAIL'}")
        verdicts.append((label, ok_ratio, ok_added))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    for label, ok_ratio, ok_added in verdicts:
        print(f"VERDICT {label}: throughput {'PASS' if ok_ratio else 'FAIL'}, latency {'PASS' if ok_added else 'FAIL'}")


if __name__ == "__main__":
    main()
