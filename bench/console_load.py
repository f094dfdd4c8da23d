"""The web console: its first load, and how soon a long session's transcript is shown.

A daemon (`agent-bridge serve`, demo back, chunk_delay_s = 0) holds one session of about
5,000 canonical events (`--turns` turns, alternately `think: plan: tool: fork:` with
its thoughts, plan, tool calls and sub-agent, and `bench:K`, K text chunks). In Debian's
Chromium, driven by Playwright, each round opens a fresh browser context (an empty
cache) and measures, alternating:

  A  console: `/#/s/<id>` loaded from nothing, until the console marks
     `console:transcript-shown` (the newest turns rendered, live, usable): the mark's
     time since navigation started, from the page's own clock.
  B  the API alone: a blank page of the same origin reads the same events the console
     asks for first (`tail_turns=20`, until `caught_up`) with fetch: the floor a page
     cannot beat (network, the daemon's replay, the stream), with no HTML, script or
     rendering.
  C  the whole history: the console again, then "Load earlier" until there is nothing
     earlier (every event rendered), for scale.

First load: every response of round 1 of A (HTML, scripts, styles, API), counted and
summed by kind; the event stream is counted, its bytes are not (it stays open).

Goal (issue 18): usable (A) in under 1 s for that session on this machine.

    .venv/bin/python bench/console_load.py                # ~40 s
    .venv/bin/python bench/console_load.py --rounds 9 --turns 80
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clean_env, median, table  # noqa: E402

BRIDGE = Path(sys.executable).with_name("agent-bridge")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
SHOWN = "console:transcript-shown"


def start_daemon(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = tmp / "bench.toml"
    config.write_text(
        '[server]\nlisten = "127.0.0.1:0"\n\n[daemon]\nacp_socket = false\n\n'
        '[routes.demo]\nback = { kind = "demo", chunk_delay_s = 0.0 }\n'
    )
    log = (tmp / "daemon.log").open("ab")
    proc = subprocess.Popen(
        [str(BRIDGE), "serve", "--config", str(config), "--state-dir", str(tmp / "state")],
        stdout=subprocess.PIPE, stderr=log, env=clean_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([proc.stdout], [], [], 30)[0]:
            raise SystemExit("the daemon did not start: see " + str(tmp / "daemon.log"))
        line += os.read(proc.stdout.fileno(), 4096)
    url = next(w for w in line.decode().split() if w.startswith("http://"))
    return proc, url


def build_session(url: str, turns: int, chunks: int) -> tuple[str, int]:
    """A session of `turns` demo turns, each waited for; its id and last event number."""
    with httpx.Client(base_url=url, timeout=60) as http:
        session_id = http.post("/api/sessions", json={"route": "demo", "intent": "a long session"}).json()["session_id"]
        for i in range(turns):
            text = f"bench:{chunks}" if i % 2 else f"think: plan: tool: fork: turn {i}"
            r = http.post(f"/api/sessions/{session_id}/prompt", json={"text": text})
            assert r.status_code == 202, r.text
            while http.get(f"/api/sessions/{session_id}").json()["status"] == "running":
                time.sleep(0.01)  # a bench, not a test: polling the status is fine here
        info = http.get(f"/api/sessions/{session_id}").json()
        return session_id, info["last_seq"]


def console_round(browser: Any, url: str, session_id: str, *, record: dict[str, Any] | None, full: bool) -> float:
    context = browser.new_context()
    page = context.new_page()
    if record is not None:
        page.on("response", lambda r: _count(record, r))
    page.goto(f"{url}/#/s/{session_id}")
    page.wait_for_selector("html[data-transcript=shown]", timeout=60_000)
    shown = page.evaluate(f"performance.getEntriesByName('{SHOWN}')[0].startTime")
    if full:  # "Load earlier" until it goes: disabled while a page loads, hidden after the last
        shown += page.evaluate(
            """async () => {
                const t0 = performance.now();
                for (;;) {
                    const button = [...document.querySelectorAll("button")].find((b) => b.textContent.trim() === "Load earlier");
                    if (!button || button.hidden || button.offsetParent === null) break;
                    if (!button.disabled) button.click();
                    await new Promise((resolve) => setTimeout(resolve, 5));
                }
                await new Promise((resolve) => requestAnimationFrame(() => resolve()));
                return performance.now() - t0;
            }"""
        )
    context.close()
    return float(shown)


def _count(record: dict[str, Any], response: Any) -> None:
    kind = response.request.resource_type
    if "text/event-stream" in (response.headers.get("content-type") or ""):
        record.setdefault("event streams", [0, 0])[0] += 1
        return
    try:
        size = len(response.body())
    except Exception:  # noqa: BLE001 - a response without a body (304, aborted)
        size = 0
    entry = record.setdefault(kind, [0, 0])
    entry[0] += 1
    entry[1] += size


def api_round(browser: Any, url: str, session_id: str) -> float:
    """The first events the console asks for, read by a bare page until `caught_up`."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{url}/console/does-not-exist")  # any page of the origin: a 404 is enough
    took = page.evaluate(
        """async (path) => {
            const t0 = performance.now();
            const response = await fetch(path);
            const reader = response.body.getReader();
            const decoder = new TextDecoder();
            let text = "";
            for (;;) {
                const { value, done } = await reader.read();
                if (done) break;
                text += decoder.decode(value, { stream: true });
                if (text.includes("event: caught_up")) break;
            }
            const took = performance.now() - t0;
            reader.cancel();
            return took;
        }""",
        f"/api/sessions/{session_id}/events?tail_turns=20",
    )
    context.close()
    return float(took)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=50, help="turns in the long session")
    parser.add_argument("--chunks", type=int, default=160, help="text chunks in every other turn")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("AGENT_BRIDGE_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
    proc, url = start_daemon(tmp)
    try:
        t0 = time.perf_counter()
        session_id, last_seq = build_session(url, args.turns, args.chunks)
        print(f"session of {last_seq} events ({args.turns} turns) built in {time.perf_counter() - t0:.1f} s")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            record: dict[str, Any] = {}
            a: list[float] = []
            b: list[float] = []
            c: list[float] = []
            console_round(browser, url, session_id, record=None, full=False)  # warm the daemon's caches
            for i in range(args.rounds):
                b.append(api_round(browser, url, session_id))
                a.append(console_round(browser, url, session_id, record=record if i == 0 else None, full=False))
                c.append(console_round(browser, url, session_id, record=None, full=True))
            browser.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)

    print("\nfirst load (round 1 of A, an empty cache):")
    rows = [[kind, str(n), f"{size / 1024:.1f} KiB" if kind != "event streams" else "(open)"] for kind, (n, size) in sorted(record.items())]
    static = sum(size for kind, (n, size) in record.items() if kind in ("document", "script", "stylesheet"))
    requests = sum(n for n, _ in record.values())
    rows.append(["total", str(requests), f"{sum(s for _, s in record.values()) / 1024:.1f} KiB"])
    print(table(["kind", "requests", "bytes"], rows))
    print(f"HTML + JS + CSS: {static / 1024:.1f} KiB")
    print()
    print(table(
        ["", "median ms", "min ms", "max ms"],
        [[name, f"{median(xs):.0f}", f"{min(xs):.0f}", f"{max(xs):.0f}"] for name, xs in (
            ("A console: transcript shown", a), ("B API alone: first events read", b), ("C console: whole history shown", c),
        )],
    ))  # fmt: skip
    print(f"RATIO console/API {median(a) / median(b):.2f}x; whole history/first view {median(c) / median(a):.2f}x")
    print(json.dumps({"shown_ms": median(a), "api_ms": median(b), "full_ms": median(c), "events": last_seq, "static_bytes": static, "requests": requests}))
    ok = median(a) < 1000
    print(f"VERDICT: {'PASS' if ok else 'FAIL'} (goal: transcript shown in under 1 s; median {median(a):.0f} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
