"""`agent-bridge ask` as a user meets it (issue 21): the real command on a pseudo-terminal
(questions typed at the prompt, the live status line, Ctrl-C), its flags and exit codes
without a terminal, an A2A agent's artifacts, and `--json` against what the store kept."""

from __future__ import annotations

import json
import os
import fcntl
import re
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import msgspec
import pyte
import trio

from bridge.core import events as ev
from bridge.core.content import DataContent

from test_e2e_cli import run

SLOW_DEMO = '[routes.demo]\nback = { kind = "demo", slow_duration_s = 60 }\n'
_STATUS = re.compile(r"\x1b7\x1bD\r\x1b\[K(?:\x1b\[2m)?([⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \d+\.\ds · [^\x1b]*)")


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty, so
    Ctrl-C typed there is its SIGINT."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Pty:
    """The real `agent-bridge ask` with stdin, stdout and stderr on one pseudo-terminal,
    as in a terminal window; `expect` waits for output, `type` types a line."""

    def __init__(self, proc: trio.Process, master: int) -> None:
        self.proc = proc
        self.stream = trio.lowlevel.FdStream(master)
        self.out = bytearray()
        self.seen = {False: 0, True: 0}  # where `expect` goes on from, on screen and raw

    @classmethod
    async def open(cls, cmd: list[str], env: dict[str, str]) -> Pty:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 rows of 100 columns
        os.set_blocking(master, False)
        try:
            proc = await trio.lowlevel.open_process(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_own_terminal)
        finally:
            os.close(slave)
        return cls(proc, master)

    async def _read(self) -> bool:
        try:
            chunk = await self.stream.receive_some()
        except trio.BrokenResourceError:  # EIO: the process closed the terminal
            return False
        self.out += chunk
        return bool(chunk)

    async def expect(self, pattern: str, *, raw: bool = False) -> re.Match[str]:
        """Wait for `pattern` in what is on screen (the status line's drawing taken out,
        unless `raw`) past what the last `expect` found."""
        regex = re.compile(pattern)
        while True:
            text = self.text() if raw else shown(self.text())
            found = regex.search(text, self.seen[raw])
            if found:
                self.seen[raw] = found.end()
                return found
            assert await self._read(), f"ask ended before {pattern!r}: {self.text()!r}"

    def text(self, start: int = 0) -> str:
        return self.out[start:].decode(errors="replace")

    async def type(self, line: str) -> None:
        await self.stream.send_all(line.encode() + b"\r")

    async def finish_keeping_terminal(self) -> int:
        while await self._read():
            pass
        return await self.proc.wait()

    async def finish(self) -> int:
        code = await self.finish_keeping_terminal()
        await self.stream.aclose()
        return code


def shown(raw: str) -> str:
    """The output without the status line's drawing and erasing: what stays on screen."""
    return re.sub(r"(?:\x1bD\x1bM)?\x1b7.*?\x1b8", "", raw, flags=re.S).replace("\r\n", "\n")


def screen_of(raw: str, *, columns: int = 100) -> list[str]:
    """What a terminal of `columns` shows once `raw` is written to it, row by row."""
    screen = pyte.Screen(columns, 400)
    pyte.Stream(screen).feed(raw)
    return list(screen.display)


async def test_questions_answered_at_the_terminal(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    cmd = [*bridge_exe, "ask", "demo", "ask: choose: name: form: hello", "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        # A permission, by number: a wrong one first is asked again.
        await t.expect(r"\? Edit notes\.txt\?.*\n.*1\. Allow")
        await t.expect(r"4\. Never allow[\s\S]*> ")
        await t.type("9")
        await t.expect(r"'9' is not an option[\s\S]*> ")
        await t.type("3")
        await t.expect(r"answer \(user\): reject")
        # A multi-select: numbers and a label, and free text beside them.
        await t.expect(r"\[Colours\] Which colours do you like\?[\s\S]*several separated by commas[\s\S]*> ")
        await t.type("1, blue, teal")
        await t.expect(r"You chose: Red, Blue, teal\.")
        # Free text, no options (it was a loop of "a number from 1 to 0").
        await t.expect(r"\? What is your name\?[\s\S]*> ")
        await t.type("Ada Lovelace, 1815")
        await t.expect(r"Hello, Ada Lovelace, 1815!")
        # A form, a field at a time: a default kept, a choice by number, a boolean.
        await t.expect(r"\? Fill in the order\.[\s\S]*Name \(string, required\): ")
        await t.type("")
        await t.expect(r"Name is required[\s\S]*Name \(string, required\): ")
        await t.type("Bob")
        await t.expect(r"How many \(integer\) \[1\]: ")
        await t.type("")
        await t.expect(r"1\. Red[\s\S]*2\. Blue[\s\S]*Colour \(string, required\): ")
        await t.type("2")
        await t.expect(r"Urgent \(boolean\): ")
        await t.type("yes")
        await t.expect(r"You filled in: colour='blue', count=1, name='Bob', urgent=True\.")
        code = await t.finish()
    screen = shown(t.text())
    assert code == 0, screen
    assert "Understood, I left notes.txt alone." in screen
    assert screen.rstrip().splitlines()[-2].endswith("[end_turn]\x1b[0m")  # then "session: …" on stderr
    assert "Traceback" not in screen


async def test_status_line_while_a_slow_turn_runs_then_ctrl_c(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DEMO)
    cmd = [*bridge_exe, "ask", "demo", "slow: hi", "--config", str(config), "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        await t.expect(r"tick 1\. ")
        drawn = await t.expect(_STATUS.pattern, raw=True)  # the spinner, the elapsed time, the last activity
        assert drawn.group(1).endswith("writing"), drawn.group(1)
        await t.expect(r"tick \d+\. [^\n]*" + _STATUS.pattern, raw=True)  # kept up to date as the reply streams on
        rows = screen_of(t.text())
        assert any(_STATUS.pattern[-40:] and re.match(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \d+\.\ds · writing", r) for r in rows), rows
        await t.expect(r"tick 30\. ")  # three rows of a 100-column terminal: the reply wrapped twice
        await t.type("\x03")  # Ctrl-C, as typed: the terminal sends SIGINT
        code = await t.finish()
    raw = t.text()
    assert code == 130, shown(raw)
    rows = [r.rstrip() for r in screen_of(raw)]
    assert not any("·" in r for r in rows), rows[:6]  # erased: nothing of it stays on the screen
    assert "[cancelled]" in rows
    full = screen_of(raw)
    reply = "".join(full[: rows.index("[cancelled]")])  # the rows the reply wrapped over, joined again
    ticks = re.findall(r"tick (\d+)\.", reply)
    assert len(ticks) >= 30 and ticks == [str(i) for i in range(1, len(ticks) + 1)]  # whole across its wrapped rows
    assert re.sub(r"\s+", " ", reply).strip().startswith(" ".join(f"tick {i}." for i in range(1, 11)))


async def test_the_terminals_echo_is_off_while_streaming_and_back_after_sigterm(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DEMO)
    cmd = [*bridge_exe, "ask", "demo", "slow: hi", "--config", str(config), "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        await t.expect(r"tick 2\. ")
        assert not termios.tcgetattr(t.stream.fileno())[3] & termios.ECHO  # keys typed now are not shown in the reply
        t.proc.terminate()
        code = await t.finish_keeping_terminal()
    assert code == 128 + 15, t.text()[-3000:]
    assert termios.tcgetattr(t.stream.fileno())[3] & termios.ECHO  # restored on the way out
    await t.stream.aclose()


async def test_ctrl_c_twice_stops_without_a_traceback(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DEMO)
    cmd = [*bridge_exe, "ask", "demo", "slow: hi", "--config", str(config), "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        await t.expect(r"tick 2\. ")
        t.proc.send_signal(signal.SIGINT)
        t.proc.send_signal(signal.SIGINT)
        code = await t.finish()
    assert code == 130, t.text()[-3000:]
    assert "Traceback" not in t.text() and "Error" not in t.text()


async def test_flags_without_a_terminal(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    ask = [*bridge_exe, "ask", "demo"]
    where = ["--state-dir", state_dir]
    name = await run([*ask, "name: hi", "--answer-text", "Ada", *where], clean_env)
    assert name.returncode == 0 and "Hello, Ada!" in name.stdout.decode()
    assert b"\x1b" not in name.stdout  # a pipe gets no colours and no status line
    many = await run([*ask, "choose: hi", "--answer-option", "red", "--answer-option", "Blue", "--answer-option", "mauve",
                      "--answer-text", "teal", *where], clean_env)  # fmt: skip
    assert many.returncode == 0 and "You chose: Red, Blue, teal." in many.stdout.decode()
    one = await run([*ask, "ask: hi", "--answer-option", "Never allow", *where], clean_env)
    assert one.returncode == 0 and "left notes.txt alone" in one.stdout.decode()
    denied = await run([*ask, "ask: hi", "--answer", "deny", *where], clean_env)
    assert denied.returncode == 0 and "answer (user): reject" in denied.stdout.decode()
    form = await run([*ask, "form: hi", "--answer-text", '{"name": "Bob", "colour": "red"}', *where], clean_env)
    assert form.returncode == 0 and "You filled in: colour='red', name='Bob'." in form.stdout.decode()
    # A free-text question that --answer cannot answer, without a terminal: left unanswered.
    unanswered = await run([*ask, "name: hi", "--answer", "first", *where], clean_env)
    assert unanswered.returncode == 3, unanswered.stderr.decode()
    assert "cannot ask: stdin is not a terminal" in unanswered.stderr.decode()
    assert unanswered.stdout.decode().rstrip().endswith("[cancelled]") and "Hello" not in unanswered.stdout.decode()
    failed = await run([*ask, "fail: hi", *where], clean_env)
    assert failed.returncode == 1
    for usage in (["nowhere", "x"], ["demo"], ["demo", "x", "--answer", "maybe"]):
        done = await run([*bridge_exe, "ask", *usage, *where], clean_env)
        assert done.returncode == 2, (usage, done.stderr.decode())


async def test_a_reader_that_goes_away_cancels_the_turn(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text(SLOW_DEMO)
    cmd = [*bridge_exe, "ask", "demo", "slow: hi", "--config", str(config), "--state-dir", state_dir]
    with trio.fail_after(60):  # `ask ... | head -c 20`: the 60-second turn does not run on
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env)
        assert proc.stdout is not None and proc.stderr is not None
        out = b""
        while b"tick 1." not in out:
            out += await proc.stdout.receive_some()
        await proc.stdout.aclose()
        err = b""
        while chunk := await proc.stderr.receive_some():
            err += chunk
        assert await proc.wait() == 1
    assert b"Traceback" not in err and b"Exception ignored" not in err, err


async def test_json_lines_are_the_stored_events(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "demo", "all: progress: data: image: hello", "--answer", "allow", "--json",
                      "--state-dir", state_dir], clean_env)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    printed = [msgspec.json.decode(line, type=ev.Event) for line in lines]  # each line is one canonical event
    session_id = done.stderr.decode().split("session: ")[1].split()[0]
    export = await run([*bridge_exe, "store", "export", session_id, "--state-dir", state_dir], clean_env)
    stored = [json.loads(line)["data"] for line in export.stdout.decode().splitlines() if json.loads(line)["type"] == "event"]
    first = printed[0].seq
    assert [json.loads(line) for line in lines] == [e for e in stored if e["seq"] >= first]
    kinds = {type(e).__name__ for e in printed}
    assert {"TurnStarted", "MessageChunk", "ProgressReported", "PlanUpdated", "ToolCallStarted", "ToolCallUpdated",
            "QuestionAsked", "QuestionAnswered", "UsageReported", "TurnEnded"} <= kinds  # fmt: skip
    assert isinstance(printed[-1], ev.TurnEnded) and printed[-1].stop_reason is ev.StopReason.END_TURN
    assert any(isinstance(e, ev.MessageChunk) and isinstance(e.content, DataContent) for e in printed)


async def test_json_on_a_terminal_has_no_status_line(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "slow.toml"
    config.write_text('[routes.demo]\nback = { kind = "demo", slow_duration_s = 1 }\n')
    cmd = [*bridge_exe, "ask", "demo", "slow: hi", "--json", "--config", str(config), "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        code = await t.finish()
    assert code == 0
    lines = t.text().replace("\r\n", "\n").splitlines()
    assert "\x1b" not in t.text()
    events = [msgspec.json.decode(line, type=ev.Event) for line in lines if not line.startswith("session: ")]
    assert isinstance(events[-1], ev.TurnEnded) and len(events) > 10
    # A question: stdout keeps the JSON lines, the question is asked beside them on stderr.
    cmd = [*bridge_exe, "ask", "demo", "name: hi", "--json", "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        await t.expect(r'"event":"question_asked"[^\n]*\n\? What is your name\?\s+\(type your answer\)\s+> ')
        await t.type("Ada")
        await t.expect(r'"event":"question_answered"[^\n]*"text":"Ada"')
        assert await t.finish() == 0
    said = [json.loads(x) for x in t.text().replace("\r\n", "\n").splitlines() if x.startswith('{"event":"message_chunk"')]
    assert "Hello, Ada!" in "".join(e["content"]["text"] for e in said)


async def test_an_a2a_sdk_agent_answering_in_artifacts(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path) -> None:
    from test_e2e_ws import a2a_agent

    async with a2a_agent(tmp_path) as url:
        config = tmp_path / "a2a.toml"
        config.write_text(f'[routes.research]\nback = {{ kind = "a2a", url = "{url}" }}\n')
        args = ["--config", str(config), "--state-dir", state_dir]
        hello = await run([*bridge_exe, "ask", "research", "hello there", *args], clean_env)
        data = await run([*bridge_exe, "ask", "research", "data:", *args], clean_env)
        as_json = await run([*bridge_exe, "ask", "research", "data:", "--json", *args], clean_env)
        free = await run([*bridge_exe, "ask", "research", "askfree:", "--answer-text", "Ada", *args], clean_env)
    assert hello.returncode == 0, hello.stderr.decode()
    assert "You said: hello there" in hello.stdout.decode()  # one artifact chunk: the answer
    assert "Working on hello" in hello.stderr.decode()  # its status message: progress, beside the answer
    assert data.returncode == 0 and '"key": "value"' in data.stdout.decode() and '"count": 42' in data.stdout.decode()
    artifacts = [e for e in (msgspec.json.decode(x, type=ev.Event) for x in as_json.stdout.splitlines()) if isinstance(e, ev.ArtifactUpdated)]
    assert [p.data for a in artifacts for p in a.parts if isinstance(p, DataContent)] == [{"key": "value", "count": 42}]
    # An A2A agent's plain input-required question is a one-field form: free text answers it.
    assert free.returncode == 0, free.stdout.decode() + free.stderr.decode()
    assert "Hello, Ada!" in free.stdout.decode()


async def test_ask_on_the_demo_loads_no_server_http_client_or_mcp(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    cmd = [sys.executable, "-X", "importtime", "-m", "bridge", "ask", "demo", "hi", "--state-dir", state_dir]
    with trio.fail_after(30):
        done = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False, env=clean_env)
    assert done.returncode == 0 and b"You said: hi" in done.stdout
    loaded = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines() if line.startswith("import time:")}
    heavy = {"hypercorn", "httpx", "httpcore", "mcp", "h11", "h2", "starlette", "trio_websocket", "psycopg", "anyio"}
    assert {m.split(".")[0] for m in loaded} & heavy == set()
    assert "bridge.ask" in loaded and "bridge.ask_terminal" not in loaded  # no terminal: its module is not needed


async def test_stdin_ending_leaves_the_question_unanswered(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    cmd = [*bridge_exe, "ask", "demo", "name: hi", "--state-dir", state_dir]
    with trio.fail_after(60):
        t = await Pty.open(cmd, clean_env)
        await t.expect(r"What is your name\?[\s\S]*> ")
        await t.stream.send_all(b"\x04")  # Ctrl-D at the start of a line: the end of stdin
        code = await t.finish()
    assert code == 3, shown(t.text())
    assert "stdin ended: the question is left unanswered" in shown(t.text())

