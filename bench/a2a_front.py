"""The A2A front vs an a2a-sdk server: SendMessage requests/s and SSE events/s, in one run.

  A  `agent-bridge serve`: the demo back (`chunk_delay_s = 0`), SQLite state in a temp
     dir, `--log-level warning`; its A2A front at /a2a/demo
  B  bench/peers/a2a_sdk_echo.py: the official a2a-sdk 1.3 server (DefaultRequestHandler,
     InMemoryTaskStore, uvicorn), an echo agent doing the same work

Both are called with A2A 1.0 over JSON-RPC by a raw HTTP/1.1 client in this process
(trio; requests encoded once, keep-alive, chunked SSE decoded), so the client is not
what is measured:

- requests/s: C connections (default 8) each send a blocking `SendMessage` "hello"
  and read the answer (a completed task with the artifact "You said: hello") for
  D seconds. A third row, the bridge answering an unknown method, is the floor its
  HTTP stack sets (hypercorn), shown for scale.
- SSE events/s: one `SendStreamingMessage` "bench:N": N one-character artifact
  updates; rate = events read / (request sent → end of stream). N per side (the SDK
  takes ~0.6 ms per event, so its N is smaller).
- Each server's CPU per request / per event, from /proc.

Rounds alternate A, B, A, B; medians. Goal (issue 6): A ≥ 2 × B on both.

`--issuer` measures inbound JWTs instead (issue 20): a local issuer (tests/issuer_support.py)
serves its JWK Set; bridge A has no `[auth]`, bridge J has `[[auth.issuers]]` and every
request carries an RS256 token. Reported: SendMessage req/s and server CPU per request
of A and J (their difference is what authentication costs a request, the token cached),
and in this process the median of `Authenticator.verify` for a new token each time
(signature checked, key cached) and for the same token again. Goal: < 0.1 ms.

With `--tracing`, a second bridge runs beside the first with tracing on (`[telemetry]
enabled`, the `otel` extra: a span per turn and its children, the SDK's batch processor
exporting OTLP/HTTP to bench/peers/otlp_sink.py, a local sink in its own process);
each round measures A and the traced bridge back to back, who goes first alternating
(the a2a-sdk server is not started). Goal (issue 19): tracing on costs ≤ 10 % of
requests/s and events/s; each round's server CPU per SendMessage on/off is printed too,
with its median (the steadier reading on a shared machine), and each server's CPU per
request by thread (the event loop; the others).

    .venv/bin/python bench/a2a_front.py                  # ~60 s
    .venv/bin/python bench/a2a_front.py --tracing --rounds 15   # the cost of tracing, ~2 min
    .venv/bin/python bench/a2a_front.py --rounds 5 --seconds 3 --events 200000
    .venv/bin/python bench/a2a_front.py --issuer         # ~40 s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PEERS, PYTHON, clean_env, median, table  # noqa: E402

GOAL = 2.0
TRACING_GOAL = 0.10  # at most this share of throughput lost with tracing on


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each of `pid`'s threads, by name (`/proc/PID/task/TID/stat`): the
    main thread is "event loop"; numbered threads ("Trio thread 3") add up under one name."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                data = f.read()
        except FileNotFoundError:  # ended since the listing
            continue
        name = "event loop" if tid == str(pid) else data[data.index(b"(") + 1 : data.rindex(b")")].decode(errors="replace").rstrip("0123456789 ")
        fields = data.rsplit(b")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


class Server:
    def __init__(self, name: str, proc: trio.Process, port: int, path: str) -> None:
        self.name, self.proc, self.port, self.path = name, proc, port, path
        self.token: str | None = None  # sent as a bearer token when set (--issuer)


async def start_bridge(tmp: Path, extra: str = "", name: str = "A bridge", *, sink: int | None = None) -> Server:
    """The bridge, its config `extra` added; with `sink` (a port), tracing on and exporting there."""
    cfg = tmp / ("traced.toml" if sink else "bench.toml")
    cfg.write_text(
        ('[telemetry]\nenabled = true\n' if sink else '')
        + '[routes.demo]\nback = { kind = "demo", chunk_delay_s = 0.0 }\n'
        '[server]\nlisten = "127.0.0.1:0"\n[daemon]\nacp_socket = false\nmetrics = false\n' + extra
    )
    exe = Path(PYTHON).with_name("agent-bridge")
    cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "bridge"]
    cmd += ["serve", "--config", str(cfg), "--state-dir", str(tmp / ("state-traced" if sink else f"state-{name}")), "--log-level", "warning"]
    env = clean_env()
    if sink:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink}", OTEL_SERVICE_NAME="bench", OTEL_TRACES_SAMPLER="always_on")
    proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    line = await _first_line(proc)
    port = int(line.split()[1].rsplit(":", 1)[1])
    return Server("A' bridge, traced" if sink else name, proc, port, "/a2a/demo")


async def start_sink() -> tuple[trio.Process, int]:
    proc = await trio.lowlevel.open_process([PYTHON, str(PEERS / "otlp_sink.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env())
    return proc, int((await _first_line(proc)).split()[1])


async def start_sdk() -> Server:
    proc = await trio.lowlevel.open_process([PYTHON, str(PEERS / "a2a_sdk_echo.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env())
    line = await _first_line(proc)
    return Server("B a2a-sdk", proc, int(line.split()[1]), "/")


async def _first_line(proc: trio.Process) -> str:
    assert proc.stdout is not None
    buf = b""
    with trio.fail_after(30):
        while b"\n" not in buf:
            chunk = await proc.stdout.receive_some()
            if not chunk:
                raise SystemExit("a server exited before it was ready")
            buf += chunk
    return buf.split(b"\n")[0].decode()


def rpc(method: str, params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def post(server: Server, body: bytes, *, accept: str = "application/json") -> bytes:
    auth = f"Authorization: Bearer {server.token}\r\n" if server.token else ""
    return (
        f"POST {server.path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
        f"Accept: {accept}\r\nA2A-Version: 1.0\r\n{auth}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


SEND = rpc("SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})
UNKNOWN = rpc("NoSuchMethod", {})


async def requests_per_s(server: Server, body: bytes, want: bytes, conns: int, seconds: float) -> tuple[float, float, dict[str, float]]:
    """(requests/s, server CPU ms per request, each server thread's CPU µs per request)
    with `conns` keep-alive connections."""
    req = post(server, body)
    done = 0

    async def one(deadline: float) -> None:
        nonlocal done
        while trio.current_time() < deadline:
            # A connection serves as many requests as its server keeps it for (hypercorn's
            # keep_alive_max_requests, 1000 by default); then the next one opens.
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
                buf, served, closed = b"", 0, False
                while not closed and trio.current_time() < deadline:
                    try:
                        await stream.send_all(req)
                    except trio.BrokenResourceError:
                        closed = True
                    while not closed:
                        end = buf.find(b"\r\n\r\n")
                        if end >= 0:
                            head = buf[:end].lower()
                            size = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                            if len(buf) >= end + 4 + size:
                                reply, buf = buf[end + 4 : end + 4 + size], buf[end + 4 + size :]
                                if want not in reply:
                                    raise SystemExit(f"{server.name}: unexpected answer {reply[:300]!r}")
                                served += 1
                                done += 1
                                break
                        try:
                            chunk = await stream.receive_some(65536)
                        except trio.BrokenResourceError:
                            chunk = b""
                        if not chunk:
                            closed = True
                        buf += chunk
                if closed and (buf or not served):
                    raise SystemExit(f"{server.name} closed the connection mid-answer")

    c0, threads0, t0 = cpu_s(server.proc.pid), thread_cpu_s(server.proc.pid), time.perf_counter()
    async with trio.open_nursery() as nursery:
        deadline = trio.current_time() + seconds
        for _ in range(conns):
            nursery.start_soon(one, deadline)
    elapsed, cpu, threads = time.perf_counter() - t0, cpu_s(server.proc.pid) - c0, thread_cpu_s(server.proc.pid)
    per_thread = {name: (s - threads0.get(name, 0.0)) / max(done, 1) * 1e6 for name, s in threads.items()}
    return done / elapsed, cpu / max(done, 1) * 1e3, per_thread


async def sse_events_per_s(server: Server, n: int) -> tuple[float, float]:
    """(events/s, server CPU µs per event) of one SendStreamingMessage "bench:N"."""
    body = rpc("SendStreamingMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": f"bench:{n}"}]}})
    c0, t0 = cpu_s(server.proc.pid), time.perf_counter()
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    count = 0
    async with stream:
        await stream.send_all(post(server, body, accept="text/event-stream"))
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(1 << 20)
        head, _, buf = buf.partition(b"\r\n\r\n")
        assert b"chunked" in head.lower(), head
        tail = b""
        while True:  # HTTP/1.1 chunked framing, then count `data:` lines across chunk edges
            while b"\r\n" not in buf:
                buf += await stream.receive_some(1 << 20)
            size_line, _, buf = buf.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                more = await stream.receive_some(1 << 20)
                if not more:
                    raise SystemExit(f"{server.name} ended the stream early")
                buf += more
            data, buf = buf[:size], buf[size + 2 :]
            if size == 0:
                break
            joined = tail + data
            count += joined.count(b"data:") - tail.count(b"data:")
            tail = joined[-8:]
    elapsed, cpu = time.perf_counter() - t0, cpu_s(server.proc.pid) - c0
    if count < n:
        raise SystemExit(f"{server.name}: {count} events for bench:{n}")
    return count / elapsed, cpu / count * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one requests/s sample")
    ap.add_argument("--conns", type=int, default=8, help="concurrent connections for requests/s")
    ap.add_argument("--events", type=int, default=100_000, help="N of bench:N for the bridge")
    ap.add_argument("--sdk-events", type=int, default=3_000, help="N of bench:N for the a2a-sdk server")
    ap.add_argument("--issuer", action="store_true", help="measure inbound JWT authentication instead (issue 20)")
    ap.add_argument("--tracing", action="store_true", help="also a bridge with tracing on, exporting to a local OTLP sink")
    args = ap.parse_args()
    if args.issuer:
        await issuer_bench(args)
        return

    with tempfile.TemporaryDirectory(prefix="a2a-front-bench-") as tmp:
        bridge = await start_bridge(Path(tmp))
        sdk = None if args.tracing else await start_sdk()
        sink, traced = (None, None)
        if args.tracing:
            sink, port = await start_sink()
            traced = await start_bridge(Path(tmp), sink=port)
        servers = [s for s in (bridge, traced, sdk) if s is not None]
        try:
            for server in servers:  # warm-up: imports, first sessions, JIT-less caches
                await requests_per_s(server, SEND, b"COMPLETED", args.conns, 0.5)
                await sse_events_per_s(server, 500)
            rps: dict[str, list[tuple[float, float, dict[str, float]]]] = {"A": [], "T": [], "B": [], "floor": []}
            sse: dict[str, list[tuple[float, float]]] = {"A": [], "T": [], "B": []}
            for r in range(args.rounds):
                if traced is not None:  # back to back with A, so both see the same machine; who goes first alternates
                    for key, server in [("A", bridge), ("T", traced)][:: 1 if r % 2 == 0 else -1]:
                        rps[key].append(await requests_per_s(server, SEND, b"COMPLETED", args.conns, args.seconds))
                    for key, server in [("A", bridge), ("T", traced)][:: 1 if r % 2 == 0 else -1]:
                        sse[key].append(await sse_events_per_s(server, args.events))
                    print(f"round {r + 1}: tracing off/on SendMessage {rps['A'][-1][0]:.0f}/{rps['T'][-1][0]:.0f} req/s; "
                          f"SSE {sse['A'][-1][0]:.0f}/{sse['T'][-1][0]:.0f} events/s", flush=True)  # fmt: skip
                    continue
                rps["A"].append(await requests_per_s(bridge, SEND, b"COMPLETED", args.conns, args.seconds))
                assert sdk is not None
                rps["B"].append(await requests_per_s(sdk, SEND, b"COMPLETED", args.conns, args.seconds))
                sse["A"].append(await sse_events_per_s(bridge, args.events))
                sse["B"].append(await sse_events_per_s(sdk, args.sdk_events))
                if r == 0:
                    rps["floor"].append(await requests_per_s(bridge, UNKNOWN, b"-32601", args.conns, args.seconds))
                print(f"round {r + 1}: SendMessage {rps['A'][-1][0]:.0f} vs {rps['B'][-1][0]:.0f} req/s; "
                      f"SSE {sse['A'][-1][0]:.0f} vs {sse['B'][-1][0]:.0f} events/s", flush=True)  # fmt: skip
        finally:
            for proc in [s.proc for s in servers] + ([sink] if sink is not None else []):
                proc.terminate()
                with trio.move_on_after(5):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()

    def m(xs: list[Any], i: int) -> float:
        return median([x[i] for x in xs])

    if args.tracing:
        _tracing_report(rps, sse, m)
        return

    rows = [
        ["SendMessage req/s", f"{m(rps['A'], 0):.0f}", f"{m(rps['B'], 0):.0f}", f"{m(rps['A'], 0) / m(rps['B'], 0):.2f}"],
        ["  server CPU ms/request", f"{m(rps['A'], 1):.2f}", f"{m(rps['B'], 1):.2f}", ""],
        ["  (bridge, unknown method: its HTTP floor)", f"{m(rps['floor'], 0):.0f}", "", ""],
        ["SSE events/s", f"{m(sse['A'], 0):.0f}", f"{m(sse['B'], 0):.0f}", f"{m(sse['A'], 0) / m(sse['B'], 0):.1f}"],
        ["  server CPU µs/event", f"{m(sse['A'], 1):.1f}", f"{m(sse['B'], 1):.1f}", ""],
    ]
    print()
    print(table(["", "A bridge", "B a2a-sdk", "A/B"], rows))
    r_rps, r_sse = m(rps["A"], 0) / m(rps["B"], 0), m(sse["A"], 0) / m(sse["B"], 0)
    print(f"\nRATIO SendMessage {r_rps:.2f}x, SSE {r_sse:.1f}x (goal >= {GOAL:g}x each); load average {os.getloadavg()[0]:.1f}")
    print(f"VERDICT: SendMessage {'PASS' if r_rps >= GOAL else 'FAIL'}, SSE {'PASS' if r_sse >= GOAL else 'FAIL'}")


async def issuer_bench(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.issuer_support import AUDIENCE, issuer_toml, running_issuer

    from bridge.config import AuthConfig, IssuerConfig
    from bridge.fronts.auth import Authenticator

    with running_issuer() as issuer, tempfile.TemporaryDirectory(prefix="a2a-auth-bench-") as tmp:
        # In this process: one verify per request, key cached; new tokens, then one token again.
        auth = Authenticator(AuthConfig(issuers=[IssuerConfig(issuer=issuer.url, audience=AUDIENCE)]))
        tokens = [issuer.mint(f"user{i}") for i in range(3000)]
        await auth.verify(tokens[0])
        fresh, again = [], []
        for token in tokens[1:]:
            t0 = time.perf_counter()
            await auth.verify(token)
            fresh.append(time.perf_counter() - t0)
        for _ in range(3000):
            t0 = time.perf_counter()
            await auth.verify(tokens[1])
            again.append(time.perf_counter() - t0)
        (Path(tmp) / "a").mkdir()
        (Path(tmp) / "j").mkdir()
        plain = await start_bridge(Path(tmp) / "a")
        jwt_ = await start_bridge(Path(tmp) / "j", "\n" + issuer_toml(issuer, discovery=False), name="J bridge + JWT")
        jwt_.token = issuer.mint("bench", exp=int(time.time()) + 3600)
        try:
            for server in (plain, jwt_):
                await requests_per_s(server, SEND, b"COMPLETED", args.conns, 0.5)
            rps: dict[str, list[tuple[float, float, dict[str, float]]]] = {"A": [], "J": []}
            for r in range(args.rounds):
                rps["A"].append(await requests_per_s(plain, SEND, b"COMPLETED", args.conns, args.seconds))
                rps["J"].append(await requests_per_s(jwt_, SEND, b"COMPLETED", args.conns, args.seconds))
                print(f"round {r + 1}: SendMessage {rps['A'][-1][0]:.0f} vs {rps['J'][-1][0]:.0f} req/s", flush=True)
        finally:
            for server in (plain, jwt_):
                server.proc.terminate()
                with trio.move_on_after(5):
                    await server.proc.wait()
                if server.proc.returncode is None:
                    server.proc.kill()
    a_rps, j_rps = median([x[0] for x in rps["A"]]), median([x[0] for x in rps["J"]])
    a_cpu, j_cpu = median([x[1] for x in rps["A"]]), median([x[1] for x in rps["J"]])
    rows = [
        ["SendMessage req/s", f"{a_rps:.0f}", f"{j_rps:.0f}", f"{j_rps / a_rps:.2f}"],
        ["  server CPU ms/request", f"{a_cpu:.3f}", f"{j_cpu:.3f}", f"{j_cpu - a_cpu:+.3f} ms"],
    ]
    print()
    print(table(["", "A no auth", "J issuer token", "J/A"], rows))
    f_ms, a_ms = median(fresh) * 1e3, median(again) * 1e3
    print(f"\nverify, median: a new RS256 token (key cached) {f_ms:.3f} ms; the same token again {a_ms:.4f} ms")
    print(f"RATIO req/s J/A {j_rps / a_rps:.2f}x; load average {os.getloadavg()[0]:.1f}")
    print(f"VERDICT: {'PASS' if f_ms < 0.1 else 'FAIL'} (a new token's check < 0.1 ms at the median)")


def _tracing_report(rps: dict[str, list[tuple[float, float, dict[str, float]]]], sse: dict[str, list[tuple[float, float]]], m: Any) -> None:
    rows = [
        ["SendMessage req/s", f"{m(rps['A'], 0):.0f}", f"{m(rps['T'], 0):.0f}", f"{m(rps['T'], 0) / m(rps['A'], 0):.3f}"],
        ["  server CPU ms/request", f"{m(rps['A'], 1):.3f}", f"{m(rps['T'], 1):.3f}", ""],
        ["SSE events/s", f"{m(sse['A'], 0):.0f}", f"{m(sse['T'], 0):.0f}", f"{m(sse['T'], 0) / m(sse['A'], 0):.3f}"],
        ["  server CPU µs/event", f"{m(sse['A'], 1):.2f}", f"{m(sse['T'], 1):.2f}", ""],
    ]
    print()
    print(table(["", "A tracing off", "A' tracing on", "on/off"], rows))
    per_round = [on[0] / off[0] for off, on in zip(rps["A"], rps["T"], strict=True)]
    print(f"\nper-round req/s on/off: {', '.join(f'{x:.3f}' for x in per_round)}; load average {os.getloadavg()[0]:.1f}")
    # Server CPU per request is what tracing adds (req/s on a shared machine is too noisy):
    # each round's on/off ratio, then their median and spread.
    cpu = [on[1] / off[1] for off, on in zip(rps["A"], rps["T"], strict=True)]
    print(f"per-round server CPU per SendMessage on/off: {', '.join(f'{x:.3f}' for x in cpu)}; "
          f"median {median(cpu) - 1:+.1%} (spread {min(cpu) - 1:+.1%} to {max(cpu) - 1:+.1%}): "
          f"{'PASS' if median(cpu) - 1 <= TRACING_GOAL else 'FAIL'}")  # fmt: skip
    # Where it goes: each thread's CPU per request, medians over the rounds (a thread absent
    # from a round counts 0 there: the span processor's thread exists only when on).
    names = sorted({n for run in rps["A"] + rps["T"] for n in run[2]}, key=lambda n: (n != "event loop", n))
    parts = [f"{n} {median([r[2].get(n, 0.0) for r in rps['A']]):.0f} -> {median([r[2].get(n, 0.0) for r in rps['T']]):.0f}" for n in names]
    print(f"server CPU µs per SendMessage by thread, off -> on (medians): {'; '.join(parts)}")
    lost_rps = 1 - m(rps["T"], 0) / m(rps["A"], 0)
    lost_sse = 1 - m(sse["T"], 0) / m(sse["A"], 0)
    ok = lost_rps <= TRACING_GOAL and lost_sse <= TRACING_GOAL
    print(f"TRACING COST SendMessage {lost_rps:+.1%}, SSE {lost_sse:+.1%} (goal <= {TRACING_GOAL:.0%}): {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    trio.run(main)
