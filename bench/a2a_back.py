"""The A2A back: time to first chunk and chunks per second, bridge vs the a2a-sdk client, one run.

One a2a-sdk agent (tests/peers/a2a_agent.py, 1.0, JSON-RPC, streaming) serves both:

  A  through the bridge: a raw NDJSON ACP client in this process → `agent-bridge acp
     research` (one process, one session, warm connection) → the agent
  B  direct: the official a2a-sdk client (`ClientFactory`, streaming) → the same agent

TTFC: from sending the prompt / message to the first artifact chunk (`chunks:1`).
Throughput: `bench:N` streams N one-character artifact chunks as fast as the SDK's
server goes; rate = N / (send → last chunk). Samples alternate A, B, A, B so machine
noise hits both alike.

Goals (issue 3): median TTFC(A) − TTFC(B) < 2 ms; throughput(A) ≥ 1 × throughput(B).

    .venv/bin/python bench/a2a_back.py                 # ~30 s
    .venv/bin/python bench/a2a_back.py --rounds 100 --chunks 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, REPO, clean_env, median, pct, table  # noqa: E402

AGENT = REPO / "tests" / "peers" / "a2a_agent.py"
TTFC_GOAL_MS = 2.0
RATE_GOAL = 1.0


async def start_agent() -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        PYTHON, str(AGENT), "--mode", "1.0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=clean_env()
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


class AcpClient:
    """A raw NDJSON ACP client: enough to prompt and count chunks, nothing else."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.buf = b""

    @classmethod
    async def spawn(cls, url: str, tmp: str) -> AcpClient:
        cfg = Path(tmp) / "bench.toml"
        cfg.write_text(f'[routes.research]\nback = {{ kind = "a2a", url = "{url}" }}\n')
        exe = Path(PYTHON).with_name("agent-bridge")
        cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "bridge"]
        proc = await asyncio.create_subprocess_exec(
            *cmd, "acp", "research", "--config", str(cfg), "--state-dir", str(Path(tmp) / "state"), "--log-level", "warning",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env=clean_env(), limit=64 * 1024 * 1024,
        )
        return cls(proc)

    async def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode() + b"\n")
        await self.proc.stdin.drain()
        return self.next_id

    async def lines(self) -> list[bytes]:
        assert self.proc.stdout is not None
        while b"\n" not in self.buf:
            data = await self.proc.stdout.read(1 << 20)
            if not data:
                raise EOFError("the bridge closed its stdout")
            self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return done

    async def call(self, method: str, params: Any) -> Any:
        rid = await self.send(method, params)
        while True:
            for line in await self.lines():
                msg = json.loads(line)
                if msg.get("id") == rid and "method" not in msg:
                    if "error" in msg:
                        raise RuntimeError(msg["error"])
                    return msg["result"]

    async def prompt(self, session: str, text: str) -> tuple[float, int, float]:
        """(seconds to the first artifact chunk, artifact chunks, seconds to the last one)."""
        t0 = time.perf_counter()
        rid = await self.send("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
        first = last = 0.0
        n = 0
        while True:
            for line in await self.lines():
                if b'"messageId":"stream"' in line:
                    n += 1
                    last = time.perf_counter() - t0
                    if n == 1:
                        first = last
                elif b'"id":%d' % rid in line and b'"stopReason"' in line:
                    return first, n, last


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def direct_client(url: str) -> Any:
    import httpx
    from a2a.client import ClientConfig, ClientFactory

    http = httpx.AsyncClient(timeout=60)
    return await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(url)


_CONTEXT: dict[str, str] = {}


async def direct(client: Any, text: str) -> tuple[float, int, float]:
    """One message in one conversation (the contextId of the first reply is reused,
    as the bridge does), timed like `AcpClient.prompt`."""
    from a2a.types import a2a_pb2 as pb

    msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text=text)], context_id=_CONTEXT.get("id", ""))
    req = pb.SendMessageRequest(message=msg)
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    async for ev in client.send_message(req):
        if ev.HasField("task") and ev.task.context_id:
            _CONTEXT.setdefault("id", ev.task.context_id)
        if ev.HasField("artifact_update"):
            n += len(ev.artifact_update.artifact.parts)
            last = time.perf_counter() - t0
            if not first:
                first = last
    return first, n, last


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=100, help="TTFC samples per side")
    ap.add_argument("--rate-rounds", type=int, default=7, help="throughput samples per side")
    ap.add_argument("--chunks", type=int, default=2000, help="chunks per throughput sample")
    args = ap.parse_args()

    agent, url = await start_agent()
    tmp = tempfile.mkdtemp(prefix="a2a-bench-")
    bridge = await AcpClient.spawn(url, tmp)
    try:
        await bridge.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = (await bridge.call("session/new", {"cwd": tmp, "mcpServers": []}))["sessionId"]
        sdk = await direct_client(url)
        for _ in range(5):  # warm both paths: connections, caches, imports
            await bridge.prompt(session, "chunks:1")
            await direct(sdk, "chunks:1")
        ttfc: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(args.rounds):
            ttfc["A"].append((await bridge.prompt(session, "chunks:1"))[0])
            ttfc["B"].append((await direct(sdk, "chunks:1"))[0])
        rate: dict[str, list[float]] = {"A": [], "B": []}
        cpu = {"bridge": 0.0, "agent": 0.0}
        for _ in range(args.rate_rounds):
            before = (_cpu_s(bridge.proc.pid), _cpu_s(agent.pid))
            _, n, last = await bridge.prompt(session, f"bench:{args.chunks}")
            cpu["bridge"] += _cpu_s(bridge.proc.pid) - before[0]
            cpu["agent"] += _cpu_s(agent.pid) - before[1]
            assert n == args.chunks, (n, args.chunks)
            rate["A"].append(n / last)
            _, n, last = await direct(sdk, f"bench:{args.chunks}")
            assert n == args.chunks, (n, args.chunks)
            rate["B"].append(n / last)
    finally:
        if bridge.proc.stdin:
            bridge.proc.stdin.close()
        try:
            await asyncio.wait_for(bridge.proc.wait(), 10)
        except asyncio.TimeoutError:
            bridge.proc.kill()
        agent.terminate()
        await agent.wait()

    ms = {k: [x * 1000 for x in v] for k, v in ttfc.items()}
    rows = [
        ["A bridge (ACP ← bridge ← agent)", f"{median(ms['A']):.2f}", f"{pct(ms['A'], 90):.2f}", f"{median(rate['A']):,.0f}"],
        ["B a2a-sdk client (direct)", f"{median(ms['B']):.2f}", f"{pct(ms['B'], 90):.2f}", f"{median(rate['B']):,.0f}"],
    ]
    print(table(["", "TTFC median ms", "TTFC p90 ms", "chunks/s (median)"], rows))
    chunks = args.chunks * args.rate_rounds
    us_bridge, us_agent = cpu["bridge"] / chunks * 1e6, cpu["agent"] / chunks * 1e6
    print(f"CPU per chunk on path A: bridge {us_bridge:.1f} µs, agent {us_agent:.1f} µs "
          f"(the bridge alone could relay ~{1e6 / us_bridge if us_bridge else float('inf'):,.0f} chunks/s)")
    added = median(ms["A"]) - median(ms["B"])
    paired = median([a - b for a, b in zip(ms["A"], ms["B"])])  # rounds alternate: noise hits both
    ratio = median(rate["A"]) / median(rate["B"])
    load = os.getloadavg()[0]
    print(f"TTFC added, median of per-round differences: {paired:.2f} ms; load average during the run: {load:.1f}")
    print(f"RATIO ttfc_added_ms={added:.2f} throughput_ratio={ratio:.2f}  (rounds={args.rounds}, chunks={args.chunks})")
    ok = added < TTFC_GOAL_MS and ratio >= RATE_GOAL
    print(f"VERDICT: {'PASS' if ok else 'FAIL'} (goal: TTFC added < {TTFC_GOAL_MS} ms, throughput ≥ {RATE_GOAL}× direct)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
