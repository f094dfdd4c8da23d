"""The first hour of a new user, as README.md and docs/chat-protocol.md tell it, in a fresh clone.

The repository is cloned into a temporary directory, and README.md's "Try it" command is
read from the clone and run step by step there: the virtual environment is made as
written; `pip install -e .` is the one step replaced (no network: the new environment is
given this one's installed packages and the clone's source, and the `agent-bridge`
script pip would write); `agent-bridge ask demo "all: hello" --answer allow` runs as
written and must stream the demo turn; `agent-bridge serve` runs as written, on a free
port and ACP socket (`$AGENT_BRIDGE_LISTEN` and `$AGENT_BRIDGE__DAEMON__ACP_SOCKET`, as
README says), and must print its console's URL. Then, as docs/chat-protocol.md
says in "In one minute": `/healthz`, its `curl` opening a session, its `chat:send` frame
sent as shown up to `chat:end`, and its Python client run with the clone's interpreter.

A README or page edited so that its commands no longer work fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest
import trio
from doc_support import ROOT, blocks, covers, curl, normalized
from trio_websocket import open_websocket_url

pytestmark = pytest.mark.trio

DEFAULT = "http://127.0.0.1:8765"  # where README and the page say the daemon listens


def section_blocks(text: str, heading: str) -> list:
    """The code blocks under `heading` (up to the next heading of the same level)."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if re.match(rf"^{level} ", lines[i])), len(lines))
    return [b for b in blocks(text) if start < b.line <= end]


def try_it_steps(readme: str) -> list[str]:
    (block,) = [b for b in section_blocks(readme, "## Try it") if b.lang == "sh"]
    return [step.strip() for step in block.text.split("&&")]


def fake_pip_install(clone: Path) -> None:
    """What `pip install -e .` leaves, without the network: the clone's source and this
    environment's packages on the new one's path, and the `agent-bridge` script."""
    venv = clone / ".venv"
    python = venv / "bin" / "python"
    found = subprocess.run([python, "-c", "import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True).stdout.split(")", 1)  # fmt: skip
    assert found[0] + ")" == str(sys.version_info[:2]), f"the clone's python is {found[0]}), the tests' {sys.version_info[:2]}"
    here = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(found[1].strip(), "agent_bridge_newcomer.pth").write_text("\n".join([str(clone), *sorted(here)]) + "\n")
    script = venv / "bin" / "agent-bridge"
    script.write_text(f"#!{python}\nimport sys\nfrom bridge.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)


async def test_the_readme_and_the_protocol_page_work_in_a_fresh_clone(tmp_path: Path, clean_env: dict[str, str]) -> None:
    clone = tmp_path / "agent-bridge"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    page = (clone / "docs" / "chat-protocol.md").read_text()
    env = {**clean_env, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("AGENT_BRIDGE_CONFIG", None)
    venv, pip, ask, serve = try_it_steps(readme)
    assert (venv, pip) == ("python3 -m venv .venv", ".venv/bin/pip install -e ."), "README's install steps changed: update this test"

    with trio.fail_after(240):
        await trio.run_process(shlex.split(venv), cwd=clone, env=env)
        fake_pip_install(clone)

        done = await trio.run_process(["bash", "-c", ask], cwd=clone, env=env, capture_stdout=True, capture_stderr=True, check=False)
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        for shape in ("plan: ", "? Edit notes.txt?", "answer (user): allow", "Sub-agent", "You said: hello"):
            assert shape in out, (shape, out)
        assert out.rstrip().splitlines()[-1] == "[end_turn]", out

        # `serve`, as README writes it, on a port of its own and a socket of its own, moved
        # the way README's Troubleshooting and Configuration say: `$AGENT_BRIDGE_LISTEN` and
        # an `AGENT_BRIDGE__TABLE__KEY` override.
        moved = {"AGENT_BRIDGE_LISTEN": "127.0.0.1:0", "AGENT_BRIDGE__DAEMON__ACP_SOCKET": str(tmp_path / "acp.sock")}
        proc = await trio.lowlevel.open_process(
            ["bash", "-c", f"exec {serve}"], cwd=clone, env={**env, **moved},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            printed = b""
            while b"console: " not in printed or not printed.endswith(b"\n"):
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, f"serve exited: {printed!r}"
                printed += chunk
            base = re.search(rb"^console: (http://127\.0\.0\.1:\d+)/$", printed, re.M)
            assert base is not None, printed
            await _first_chat(base.group(1).decode(), clone, page)
        finally:
            proc.terminate()
            with trio.move_on_after(20):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0


async def _first_chat(base: str, clone: Path, page: str) -> None:
    """docs/chat-protocol.md, "In one minute", on the daemon at `base`."""
    minute = section_blocks(page, "## In one minute")
    command = next(b for b in minute if b.lang == "sh")
    shown = json.loads(next(b for b in minute if b.lang == "json" and b.line > command.line).text)
    frame = next(b for b in minute if b.marker == "newcomer")
    client = next(b for b in minute if b.lang == "python")
    async with httpx.AsyncClient(timeout=20) as h:
        r = await h.get(base + "/healthz")
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
        method, url, headers, body = curl(command.text.replace(DEFAULT, base), {})
        r = await h.request(method, url, headers=headers, content=body)
        assert r.status_code == 200 and covers(normalized(shown), normalized(r.json())) == [], r.text
        session = r.json()["session_id"]
    sent = frame.text.replace(shown["session_id"], session)
    async with open_websocket_url(base.replace("http://", "ws://") + "/ws") as ws:
        await ws.send_message(sent)
        seen = []
        while (got := json.loads(await ws.get_message()))["event"] != "chat:end":
            assert got["event"] != "system:error", got
            seen.append(got)
        assert got["data"]["status"] == "completed", got
        assert any(f["data"].get("data", {}).get("content") == "You said: hello" for f in seen), seen
    script = clone / "chat.py"
    script.write_text(client.text.replace(DEFAULT.replace("http://", "ws://"), base.replace("http://", "ws://")))
    done = await trio.run_process([clone / ".venv" / "bin" / "python", script, session], capture_stdout=True, capture_stderr=True, check=False)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and lines[-1] == "chat:end " and "turn:patch add_content" in lines, (lines, done.stderr[-2000:])
