"""MCP prompts: time to the first command list, and prompts/get through the MCP front.

1. **First command list.** `agent-bridge acp demo` spawned with one stdio MCP prompt
   source (`@modelcontextprotocol/server-everything` from npm, node), `initialize` and
   `session/new` written at once: the time from spawn to the `available_commands_update`
   that carries the source's prompts, beside the time to the first update at all (the
   demo's own commands, announced with `session/new`) and the same spawn without the
   source (what an editor waits with no MCP source). Fresh process each sample, the two
   configurations interleaved.

2. **prompts/get round trips per second**, in one run, with the `mcp` SDK's client (in
   this process, under trio) calling `prompts/get args-prompt {city}`:
     - direct: the source itself, server-everything over stdio, and over Streamable
       HTTP (the same client's ceiling on that transport);
     - through `agent-bridge mcp` (stdio), which forwards to the same source over stdio;
     - through `/mcp` of `agent-bridge serve` (Streamable HTTP), likewise;
     - a template of the config through each front (no source hop: the front's own cost).
   Each bridge line is compared with the direct line of the same client transport.
   Sequential calls (one in flight) and 8 in flight; each for `--seconds`.

    .venv/bin/python bench/mcp_prompts.py                # ~1 min
    .venv/bin/python bench/mcp_prompts.py --rounds 10 --seconds 5

Needs node and tests/peers/mcp_everything installed (`npm ci` there).
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
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import PYTHON, REPO, clean_env, median, pct, table  # noqa: E402

EVERYTHING = REPO / "tests" / "peers" / "mcp_everything" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
EVERYTHING_HTTP = REPO / "tests" / "peers" / "mcp_everything" / "http.mjs"
BRIDGE = str(Path(PYTHON).with_name("agent-bridge"))

TEMPLATE = """
[prompts.weather]
description = "Weather"
arguments = [{ name = "city", required = true }]
messages = [{ text = "What's weather in {city}?" }]
"""


def config(tmp: Path, *, source: bool, listen: bool = False) -> Path:
    node = shutil.which("node")
    text = '[routes.demo]\nback = { kind = "demo", chunk_delay_s = 0 }\n'
    if listen:
        text = '[server]\nlisten = "127.0.0.1:0"\n[daemon]\nacp_socket = false\n' + text
    if source:
        text += f'[[prompt_sources]]\nname = "everything"\ncommand = {json.dumps([node, str(EVERYTHING), "stdio"])}\n'
    text += TEMPLATE
    path = tmp / f"bench-{'src' if source else 'plain'}{'-http' if listen else ''}.toml"
    path.write_text(text)
    return path


# -- 1. first command list -----------------------------------------------------------------------


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def first_lists(cfg: Path, want: str | None) -> tuple[float, float]:
    """(spawn → first available_commands_update, spawn → the one that has `want`)."""
    state = tempfile.mkdtemp(prefix="bench-mcp-")
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [BRIDGE, "acp", "demo", "--config", str(cfg), "--state-dir", state],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=clean_env(), bufsize=0, cwd=REPO,
        )  # fmt: skip
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(_line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))
        p.stdin.write(_line({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}))
        first = found = None
        try:
            while found is None:
                line = p.stdout.readline()
                if not line:
                    err.seek(0)
                    raise RuntimeError(f"the bridge exited: {err.read().decode(errors='replace')[-2000:]}")
                msg = json.loads(line)
                update = msg.get("params", {}).get("update", {})
                if update.get("sessionUpdate") == "available_commands_update":
                    now = time.perf_counter() - t0
                    first = first if first is not None else now
                    if want is None or want in {c["name"] for c in update["availableCommands"]}:
                        found = now
        finally:
            p.stdin.close()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
            shutil.rmtree(state, ignore_errors=True)
    assert first is not None
    return first, found


def bench_first_list(tmp: Path, rounds: int) -> None:
    with_src, without = config(tmp, source=True), config(tmp, source=False)
    a_first, a_found, b_first = [], [], []
    for _ in range(rounds):
        f, w = first_lists(with_src, "args-prompt")
        a_first.append(f)
        a_found.append(w)
        b_first.append(first_lists(without, None)[0])
    ms = lambda xs: f"{median(xs) * 1000:.0f} / {pct(xs, 90) * 1000:.0f}"  # noqa: E731
    print(f"\n1. First command list after spawn, ms (median / p90, {rounds} rounds)\n")
    print(table(
        ["agent-bridge acp demo", "first available_commands_update", "with the source's prompts"],
        [["one stdio MCP source (server-everything)", ms(a_first), ms(a_found)],
         ["no prompt source", ms(b_first), "-"]],
    ))  # fmt: skip


# -- 2. prompts/get round trips ----------------------------------------------------------------------


async def rate(client: Any, name: str, args: dict[str, str], seconds: float, in_flight: int) -> float:
    count = 0
    deadline = trio.current_time() + seconds

    async def worker() -> None:
        nonlocal count
        while trio.current_time() < deadline:
            await client.get_prompt(name, args)
            count += 1

    for _ in range(20):  # warm up
        await client.get_prompt(name, args)
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    return count / (trio.current_time() - t0)


async def bench_get(tmp: Path, seconds: float) -> None:
    from mcp import Client, StdioServerParameters

    node = shutil.which("node")
    assert node is not None
    rows: list[list[str]] = []
    results: dict[str, tuple[float, float]] = {}

    async def measure(label: str, target: Any, name: str) -> None:
        async with Client(target, mode="legacy", cache=None) as client:
            seq = await rate(client, name, {"city": "Paris"}, seconds, 1)
            par = await rate(client, name, {"city": "Paris"}, seconds, 8)
        results[label] = (seq, par)

    await measure("direct: server-everything (stdio)", StdioServerParameters(command=node, args=[str(EVERYTHING), "stdio"]), "args-prompt")
    http_log = (tmp / "everything.log").open("w+b")
    everything = subprocess.Popen(
        [node, str(EVERYTHING_HTTP)], cwd=EVERYTHING_HTTP.parent, stdout=subprocess.DEVNULL, stderr=http_log, env={**clean_env(), "PORT": "0"}
    )
    try:
        port = None
        for _ in range(200):
            http_log.seek(0)
            m = re.search(rb"LISTENING (\d+)", http_log.read())
            if m:
                port = int(m.group(1))
                break
            await trio.sleep(0.05)
        assert port is not None, "server-everything (HTTP) did not start"
        await measure("direct: server-everything (Streamable HTTP)", f"http://127.0.0.1:{port}/mcp", "args-prompt")
    finally:
        everything.kill()
        everything.wait()
        http_log.close()
    stdio = StdioServerParameters(
        command=BRIDGE,
        args=["mcp", "--config", str(config(tmp, source=True)), "--state-dir", str(tmp / "state-stdio")],
        env=clean_env(),
    )
    await measure("agent-bridge mcp (stdio) → source (stdio)", stdio, "args-prompt")
    await measure("agent-bridge mcp (stdio): a template", stdio, "weather")
    state = tmp / "state-http"
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen(
        [BRIDGE, "serve", "--config", str(config(tmp, source=True, listen=True)), "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=log, env=clean_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().split()[1] + "/mcp"
        await trio.sleep(3)  # the SDK loaded, the source listed
        await measure("/mcp of serve (Streamable HTTP) → source (stdio)", url, "args-prompt")
        await measure("/mcp of serve: a template", url, "weather")
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
    for label, (seq, par) in results.items():
        base = results["direct: server-everything (" + ("Streamable HTTP" if "/mcp" in label or "HTTP" in label else "stdio") + ")"]
        rows.append([label, f"{seq:,.0f}", f"{par:,.0f}", f"{seq / base[0]:.2f} / {par / base[1]:.2f}"])
    print(f"\n2. prompts/get round trips per second ({seconds:g} s each, mcp SDK client in this process)\n")
    print(table(["path", "1 in flight", "8 in flight", "÷ direct, same transport (1 / 8)"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if not EVERYTHING.exists() or shutil.which("node") is None:
        sys.exit("needs node and server-everything: (cd tests/peers/mcp_everything && npm ci)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_first_list(tmp, args.rounds)
        trio.run(bench_get, tmp, args.seconds)


if __name__ == "__main__":
    main()
