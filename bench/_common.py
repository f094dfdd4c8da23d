"""Small helpers shared by the benchmarks in bench/ (not a test dependency)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEERS = BENCH / "peers"
PYTHON = sys.executable  # run the benches with .venv/bin/python: the same interpreter spawns every peer


def bridge_cmd() -> list[str]:
    """`agent-bridge acp demo` from the same venv as this interpreter (console script)."""
    script = Path(PYTHON).with_name("agent-bridge")
    if script.exists():
        return [str(script), "acp", "demo"]
    return [PYTHON, "-m", "bridge", "acp", "demo"]


def clean_env() -> dict[str, str]:
    """The environment for spawned peers: no config override, no stray Python flags."""
    env = dict(os.environ)
    for k in ("AGENT_BRIDGE_CONFIG", "PYTHONPROFILEIMPORTTIME", "PYTHONDEVMODE", "PYTHONTRACEMALLOC", "PYTHONASYNCIODEBUG"):
        env.pop(k, None)
    return env


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def close_process(p: subprocess.Popen[bytes], err: object) -> None:
    """Close a peer's stdin, wait for it (killing it after 15 s), then its pipes and log."""
    try:
        p.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    p.stdout.close()  # type: ignore[union-attr]
    err.close()  # type: ignore[attr-defined]
