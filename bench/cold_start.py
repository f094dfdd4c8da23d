"""Cold start: spawn → `initialize` response, agent-bridge vs a minimal official-SDK agent.

Each sample spawns a fresh process, writes the ACP `initialize` request on its stdin
right after spawn, and times until the response line arrives on its stdout. The two
agents are sampled interleaved (bridge, sdk, bridge, sdk, ...) so machine noise hits
both alike; medians and p90s are reported with the ratio bridge / sdk.

  A  `agent-bridge acp demo --state-dir <fresh temp dir>` (the command an editor spawns)
  B  bench/peers/sdk_agent.py: `acp.run_agent` with an agent that only answers initialize
  -  floor: the same interpreter echoing one stdin line (no imports), for scale only

Goal: bridge median ≤ 0.5 × SDK median. If missed (or with --profile) the bridge's
startup is profiled with `python -X importtime -m bridge acp demo` (stdin closed)
and the dominant imports are printed.

    .venv/bin/python bench/cold_start.py              # 15 rounds, ~20–30 s
    .venv/bin/python bench/cold_start.py --rounds 50  # tighter medians
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PEERS, PYTHON, REPO, bridge_cmd, clean_env, median, pct, table  # noqa: E402

GOAL = 0.5
INIT = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        },
        separators=(",", ":"),
    ).encode()
    + b"\n"
)
ECHO = "import sys; sys.stdout.write(sys.stdin.readline()); sys.stdout.flush()"


def spawn_to_response(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to the first complete stdout line (the initialize response)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, bufsize=0, cwd=REPO)
        try:
            p.stdin.write(INIT)  # type: ignore[union-attr]
            fd = p.stdout.fileno()  # type: ignore[union-attr]
            buf = b""
            while b"\n" not in buf:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
            t1 = time.perf_counter()
            line = buf.split(b"\n", 1)[0]
            try:
                msg = json.loads(line)
                ok = msg.get("id") == 1 and ("result" in msg or "method" in msg)
            except ValueError:
                ok = False
            if not ok:
                err.seek(0)
                raise RuntimeError(f"{cmd}: bad initialize reply {line[:200]!r}\nstderr: {err.read()[-2000:].decode(errors='replace')}")
            return t1 - t0
        finally:
            p.stdin.close()  # type: ignore[union-attr]
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()  # type: ignore[union-attr]


def run(rounds: int, floor: bool) -> dict[str, list[float]]:
    env = clean_env()
    bridge = bridge_cmd()
    sdk = [PYTHON, str(PEERS / "sdk_agent.py")]
    echo = [PYTHON, "-c", ECHO]
    samples: dict[str, list[float]] = defaultdict(list)

    def one_bridge() -> float:
        state = tempfile.mkdtemp(prefix="bench-cold-")
        try:
            return spawn_to_response([*bridge, "--state-dir", state], env)
        finally:
            shutil.rmtree(state, ignore_errors=True)

    # Warm-up (not counted): writes .pyc caches, warms the page cache for both.
    one_bridge()
    spawn_to_response(sdk, env)
    for i in range(rounds):
        # Alternate which goes first so neither always follows the other.
        order = [("bridge", one_bridge), ("sdk", lambda: spawn_to_response(sdk, env))]
        if i % 2:
            order.reverse()
        for name, fn in order:
            samples[name].append(fn())
        if floor:
            samples["floor"].append(spawn_to_response(echo, env))
    return samples


def importtime_profile(top: int) -> None:
    """`python -X importtime -m bridge acp demo` with stdin closed; the costliest imports."""
    state = tempfile.mkdtemp(prefix="bench-cold-prof-")
    runs = []
    try:
        for _ in range(3):  # keep the fastest of three: importtime is noisy too
            t0 = time.perf_counter()
            r = subprocess.run(
                [PYTHON, "-X", "importtime", "-m", "bridge", "acp", "demo", "--state-dir", state],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=clean_env(),
                cwd=REPO,
                timeout=60,
            )
            runs.append((time.perf_counter() - t0, r.stderr.decode(errors="replace")))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    wall, err = min(runs)
    rows = []  # (self_us, cumulative_us, depth, name)
    pat = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S.*)$")
    for line in err.splitlines():
        m = pat.match(line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), len(m.group(3)) // 2, m.group(4).strip()))
    total = sum(r[0] for r in rows)
    print("\nStartup profile of the bridge (python -X importtime -m bridge acp demo, stdin closed; best of 3)")
    print(f"  process wall time to exit: {wall * 1000:.0f} ms; all imports: {total / 1000:.0f} ms (sum of self times)")
    # Top-level packages: group every import by its first dotted component, self times summed.
    by_pkg: dict[str, int] = defaultdict(int)
    for s, _c, _d, name in rows:
        by_pkg[name.split(".")[0]] += s
    pk = sorted(by_pkg.items(), key=lambda kv: -kv[1])[:top]
    print("\n  by top-level package (sum of self time):")
    print("  " + table(["package", "ms", "share"], [[n, f"{us / 1000:.1f}", f"{us / total:.0%}"] for n, us in pk]).replace("\n", "\n  "))
    # Biggest cumulative imports that start at depth ≤ 1 (what each import statement pulls in).
    first = sorted((r for r in rows if r[2] <= 1), key=lambda r: -r[1])[:top]
    print("\n  biggest imports by cumulative time (depth 0-1; nested entries include their children):")
    print(
        "  "
        + table(
            ["import", "cumulative ms", "depth"],
            [[n, f"{c / 1000:.1f}", str(d)] for _s, c, d, n in first],
        ).replace("\n", "\n  ")
    )
    bridge_mods = sorted((r for r in rows if r[3].startswith("bridge")), key=lambda r: -r[1])[:top]
    print("\n  bridge.* modules by cumulative time (which of our imports pull the weight):")
    print(
        "  "
        + table(["module", "cumulative ms", "self ms"], [[n, f"{c / 1000:.1f}", f"{s / 1000:.1f}"] for s, c, _d, n in bridge_mods]).replace(
            "\n", "\n  "
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (each spawns both agents once); default 15")
    ap.add_argument("--no-floor", action="store_true", help="skip the interpreter floor row")
    ap.add_argument("--profile", action="store_true", help="profile the bridge's imports even if the goal is met")
    ap.add_argument("--top", type=int, default=12, help="rows in each profile table")
    a = ap.parse_args()

    t = time.perf_counter()
    s = run(a.rounds, not a.no_floor)
    b, k = median(s["bridge"]), median(s["sdk"])
    ratio = b / k
    print(f"Cold start: spawn → initialize response, {a.rounds} interleaved rounds ({time.perf_counter() - t:.0f} s)\n")
    rows = []
    for name, label in (("bridge", "agent-bridge acp demo"), ("sdk", "official ACP SDK, minimal agent"), ("floor", "python echo (floor)")):
        xs = s.get(name)
        if xs:
            rows.append([label, f"{median(xs) * 1000:.1f}", f"{pct(xs, 90) * 1000:.1f}", f"{min(xs) * 1000:.1f}", f"{max(xs) * 1000:.1f}", str(len(xs))])
    print(table(["agent", "median ms", "p90 ms", "min ms", "max ms", "n"], rows))
    print(f"\nRATIO bridge/sdk (medians) = {ratio:.3f}   (p90 ratio {pct(s['bridge'], 90) / pct(s['sdk'], 90):.3f})")
    met = ratio <= GOAL
    print(f"VERDICT: {'PASS' if met else 'FAIL'} — bridge cold start is {ratio:.2f}× the SDK agent's; goal ≤ {GOAL}×")
    if not met or a.profile:
        importtime_profile(a.top)


if __name__ == "__main__":
    main()
