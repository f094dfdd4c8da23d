"""The ACP back inside a running SessionManager, with real agent processes.

The bridge runs in this process (a MemoryStore, sessions, the back); each agent is
the scriptable agent on the official ACP Python SDK (tests/peers/acp_agent_sdk.py),
spawned by the back. Covers what the end-to-end tests do not reach as directly:
misbehaving agents while other sessions go on, the permission policies, a question
left unanswered, cancel against an agent that ignores it, restart with and without
`loadSession`, one agent shared by several sessions, the route's own files and
terminals, the daemon stopping mid-turn, and agents that cannot start.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from acp_back_support import PEERS, PY_AGENT, live_pids, marker, pid_alive, wait_gone

from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core import events as ev
from bridge.core.content import DataContent, TextContent
from bridge.session import Session, SessionManager
from bridge.store.memory import MemoryStore

CEILING_S = 60
OVERSIZED_AGENT = [sys.executable, str(PEERS / "acp_agent_oversized.py")]


class Recorder:
    """Every event of a session; answers questions by `policy` if set."""

    def __init__(self, session: Session, policy: str | None = None) -> None:
        self.session = session
        self.events: list[ev.Event] = []
        self.policy = policy
        self._changed = trio.Event()
        session.subscribe(self)

    def deliver(self, event: ev.Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()
        if isinstance(event, ev.QuestionAsked) and self.policy is not None:
            self.session.answer(event.question.id, selected=[self.policy])

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass

    def text(self) -> str:
        return "".join(getattr(e.content, "text", "") for e in self.events if isinstance(e, ev.MessageChunk) and not e.thought)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    async def wait_for(self, ready: Any) -> None:
        """Return once `ready()` is true, checked at each event delivered (no polling)."""
        while True:
            changed = self._changed
            if ready():
                return
            await changed.wait()

    async def until(self, needle: str) -> None:
        await self.wait_for(lambda: needle in self.text())


def route(tag: str, *flags: str, **back: Any) -> dict[str, Any]:
    extra = {k: back.pop(k) for k in ("question_timeout_s", "cancel_grace_s") if k in back}
    return {"back": {"kind": "acp", "command": [*PY_AGENT, *flags, "--tag", tag], **back}, **extra}


@asynccontextmanager
async def runtime(routes: dict[str, Any]) -> AsyncIterator[SessionManager]:
    config = parse_config({"routes": routes})
    store = MemoryStore()
    await store.open()
    manager = SessionManager(config, store, make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        try:
            yield manager
        finally:
            with trio.move_on_after(15, shield=True):
                await manager.close_all()
            nursery.cancel_scope.cancel()


async def turn(session: Session, text: str) -> ev.TurnEnded:
    return await session.start_turn([TextContent(text=text)]).wait()


# -- misbehaving agents ---------------------------------------------------------------------


async def test_misbehaving_agent_fails_its_turn_clearly_and_others_go_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tag, bad = marker(), marker()
    routes = {"good": route(tag), "bad": route(bad, "--protocol-version", "2")}
    with trio.fail_after(CEILING_S):
        async with runtime(routes) as m:
            steady = await m.create("good", cwd=str(tmp_path))
            rec_steady = Recorder(steady)
            odd = await m.create("good", cwd=str(tmp_path))
            rec = Recorder(odd)
            refused = await m.create("bad", cwd=str(tmp_path))
            running = steady.start_turn([TextContent(text="slow")])
            await rec_steady.until("tick1")

            ended = await turn(refused, "text:1")
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and "protocolVersion 2" in ended.error.message and "route bad" in ended.error.message

            ended = await turn(odd, "garbage text:2")
            assert ended.stop_reason is ev.StopReason.END_TURN and "after garbage" in rec.text() and "c1" in rec.text()
            assert "not ACP on stdout" in caplog.text and "this is not json" in caplog.text

            ended = await turn(odd, "text:1 noreason")
            assert ended.error is not None and ended.error.message == "route good: the agent answered session/prompt with no stopReason"
            ended = await turn(odd, "badreason")
            assert ended.error is not None and "stopReason 'weird'" in ended.error.message

            ended = await turn(odd, "late text:1")
            assert ended.stop_reason is ev.StopReason.END_TURN
            await trio.sleep(0.3)
            assert "too late" not in rec.text()  # an update after the response belongs to no turn
            assert "outside a turn" in caplog.text

            ended = await turn(odd, "text:3")
            assert ended.stop_reason is ev.StopReason.END_TURN
            assert not running._done.is_set()  # the other session streamed on all along
            steady.cancel()
            assert (await running.wait()).stop_reason is ev.StopReason.CANCELLED
            await wait_gone(bad)
        await wait_gone(tag)


def oversized_route(tag: str, **back: Any) -> dict[str, Any]:
    return {"back": {"kind": "acp", "command": [*OVERSIZED_AGENT, "--tag", tag], "max_frame_bytes": 4096, **back}}


async def pid_of(s: Session, rec: Recorder) -> int:
    assert (await turn(s, "pid")).stop_reason is ev.StopReason.END_TURN
    return int(rec.text().rsplit("pid=", 1)[1])


async def test_a_line_over_max_frame_bytes_fails_what_it_belongs_to(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 13, finding 6: the turn fails with a clear error (it hung), the agent goes on."""
    tag = marker()
    said = "route r: the agent sent a line over max_frame_bytes (4096 bytes)"
    with trio.fail_after(CEILING_S):
        async with runtime({"r": oversized_route(tag)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            pid = await pid_of(s, rec)

            ended = await turn(s, "text:1 bigreply:10000")  # the answer to session/prompt
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.message == f"{said} as its answer to session/prompt"

            ended = await turn(s, "text:1 big:10000 text:2")  # an update of the turn
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.message == f"{said} during session/prompt"

            ended = await turn(s, "bigline:10000 text:1")  # a line that cannot be told
            assert ended.error is not None and ended.error.message == f"{said} during session/prompt"

            # The agent's own request over the bound is answered -32600; its turn goes on.
            assert (await turn(s, "bigask:10000 text:1")).stop_reason is ev.StopReason.END_TURN
            assert "write-error=-32600" in rec.text()
            assert await pid_of(s, rec) == pid  # none of this ended the agent
            assert "over max_frame_bytes (4096 bytes)" in caplog.text
        await wait_gone(tag)


async def test_a_line_that_never_ends_fails_the_turn_and_restarts_the_agent(tmp_path: Path) -> None:
    """Issue 13, finding 6: no newline, ever: bounded memory, the turn fails, the agent is ended."""
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": oversized_route(tag)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            pid = await pid_of(s, rec)
            ended = await turn(s, "noline:1000000")
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None
            assert ended.error.message == "route r: the agent sent a line over max_frame_bytes (4096 bytes) during session/prompt"
            await wait_gone(pids=[pid])  # ended as a crash is
            assert await pid_of(s, rec) != pid  # and the next turn has a new one

            # A line left unended below the kill bound: the stuck agent is not used again.
            pid = await pid_of(s, rec)
            assert (await turn(s, "noline:5000")).stop_reason is ev.StopReason.FAILED
            assert await pid_of(s, rec) != pid
            await wait_gone(pids=[pid])
        await wait_gone(tag)


async def test_an_agent_that_cannot_start_fails_the_turn_clearly(tmp_path: Path) -> None:
    routes = {"r": {"back": {"kind": "acp", "command": ["/nonexistent/agent-xyz", "--acp"]}}}
    with trio.fail_after(CEILING_S):
        async with runtime(routes) as m:
            s = await m.create("r", cwd=str(tmp_path))
            for _ in range(2):
                ended = await turn(s, "hello")
                assert ended.stop_reason is ev.StopReason.FAILED
                assert ended.error is not None
                assert ended.error.message == "route r: cannot start the agent '/nonexistent/agent-xyz': No such file or directory"


async def test_an_unset_env_reference_is_named_not_guessed(tmp_path: Path) -> None:
    tag = marker()
    routes = {"r": route(tag, env={"TOKEN": {"env": "ACPBACK_SURELY_UNSET_VAR"}})}
    with trio.fail_after(CEILING_S):
        async with runtime(routes) as m:
            s = await m.create("r", cwd=str(tmp_path))
            ended = await turn(s, "hello")
            assert ended.error is not None
            assert ended.error.message == "route r: env.TOKEN: the environment variable ACPBACK_SURELY_UNSET_VAR is not set"
    assert not live_pids(tag)


# -- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "prompt", "said", "asked"),
    [
        ("ask", "ask", "permission=allow", True),
        ("allow_read", "askread", "permission=allow", False),
        ("allow_read", "ask", "permission=allow", True),
        ("deny", "ask", "permission=reject", False),
        ("deny", "askread", "permission=reject", False),
    ],
)
async def test_permission_policies(tmp_path: Path, policy: str, prompt: str, said: str, asked: bool) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, permissions=policy)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s, policy="allow")
            ended = await turn(s, prompt)
            assert ended.stop_reason is ev.StopReason.END_TURN
            assert said in rec.text()
            questions = rec.of(ev.QuestionAsked)
            assert bool(questions) is asked
            if asked:
                q = questions[0].question
                assert q.kind == "permission" and q.tool_call_id == "t2"
                assert [(o.id, o.label, o.kind) for o in q.options] == [
                    ("allow", "Allow", "allow_once"),
                    ("always", "Always allow", "allow_always"),
                    ("reject", "Reject", "reject_once"),
                ]
        await wait_gone(tag)


async def test_permission_tool_call_progress_and_data_reach_the_session_whole(tmp_path: Path) -> None:
    """Finding 2: every field of a permission request's toolCall reaches the session, as
    an update of a tool call the agent announced and as the start of one it did not;
    finding 5: a progress thought and an embedded JSON resource read back as the
    canonical kinds they were (bridge -> bridge keeps them), an integer an integer."""
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s, policy="allow")
            ended = await turn(s, "ask askfresh progress data")
            assert ended.stop_reason is ev.StopReason.END_TURN
            assert rec.text().count("permission=allow") == 2
            kinds = [type(e).__name__ for e in rec.events if getattr(e, "tool_call_id", None) in ("t2", "t3") or isinstance(e, ev.QuestionAsked)]
            assert kinds == ["ToolCallStarted", "ToolCallUpdated", "QuestionAsked", "ToolCallStarted", "QuestionAsked"]
            (_, update) = [e for e in rec.events if getattr(e, "tool_call_id", None) == "t2"]
            assert update == ev.ToolCallUpdated(
                tool_call_id="t2",
                title="edit notes.txt",
                kind="edit",
                status="pending",
                raw_input={"path": "notes.txt", "text": "new"},
                content=[ev.ToolCallContent(type="diff", path="notes.txt", old_text="old", new_text="new")],
                locations=[ev.ToolLocation(path="notes.txt", line=1)],
                seq=update.seq,
            )
            (fresh,) = [e for e in rec.events if getattr(e, "tool_call_id", None) == "t3"]
            assert fresh == ev.ToolCallStarted(
                tool_call_id="t3",
                title="Run make test",
                kind="execute",
                status="pending",
                raw_input={"command": "make test"},
                locations=[ev.ToolLocation(path="Makefile", line=3)],
                seq=fresh.seq,
            )
            assert [q.question.tool_call_id for q in rec.of(ev.QuestionAsked)] == ["t2", "t3"]
            (progress,) = rec.of(ev.ProgressReported)
            assert progress.content == [TextContent(text="Working on it.")]
            assert not [e for e in rec.of(ev.MessageChunk) if e.thought]  # status text, not a thought
            (data,) = [e.content for e in rec.of(ev.MessageChunk) if isinstance(e.content, DataContent)]
            assert data.data == {"key": "value", "count": 42, "ratio": 0.5, "nested": {"ok": True, "none": None}}
            assert type(data.data["count"]) is int and data.mime_type is None
        await wait_gone(tag)


async def test_an_unanswered_permission_is_rejected_never_allowed(tmp_path: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, question_timeout_s=0.5)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            ended = await turn(s, "ask text:1")
            assert ended.stop_reason is ev.StopReason.END_TURN  # a reject is not a cancel
            assert "permission=reject" in rec.text()
            (answer,) = rec.of(ev.QuestionAnswered)
            assert answer.by == "timeout" and answer.selected == ["reject"]
        await wait_gone(tag)


async def test_cancel_while_a_permission_is_pending(tmp_path: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            t = s.start_turn([TextContent(text="ask")])
            await rec.wait_for(lambda: rec.of(ev.QuestionAsked))
            s.cancel()
            ended = await t.wait()
            assert ended.stop_reason is ev.StopReason.CANCELLED
            assert "permission=cancelled" in rec.text()  # ACP: pending permissions answer "cancelled"
        await wait_gone(tag)


async def test_an_agents_form_question_is_asked_and_answered_declined_or_cancelled(tmp_path: Path) -> None:
    """The agent's `elicitation/create` (form) reaches the session as a choice; the answer
    goes back in its field names; a declined question and a cancelled turn too."""
    tag = marker()
    matrix = {"back": {"kind": "acp", "command": [sys.executable, str(PEERS / "acp_agent_matrix.py"), "--tag", tag]}}
    with trio.fail_after(CEILING_S):
        async with runtime({"m": matrix, "sdk": route(tag)}) as m:
            caps = await m.create("sdk", cwd=str(tmp_path))
            rec = Recorder(caps)
            assert (await turn(caps, "caps")).stop_reason is ev.StopReason.END_TURN
            assert '"elicitation": {"form": {}}' in rec.text()  # declared, form only

            s = await m.create("m", cwd=str(tmp_path))
            rec = Recorder(s)

            async def asked(text: str) -> tuple[Any, ev.Question]:
                before = len(rec.of(ev.QuestionAsked))
                t = s.start_turn([TextContent(text=text)])
                await rec.wait_for(lambda: len(rec.of(ev.QuestionAsked)) > before)
                return t, rec.of(ev.QuestionAsked)[-1].question

            t, q = await asked("choose: hello")
            assert (q.kind, q.prompt, q.header, q.multi_select, q.allow_text) == ("choice", "Which colours do you like?", "Colours", True, True)
            assert [(o.id, o.label) for o in q.options] == [("red", "Red"), ("green", "Green"), ("blue", "Blue")]
            s.answer(q.id, selected=["red", "blue"], text="teal")
            assert (await t.wait()).stop_reason is ev.StopReason.END_TURN
            assert rec.text() == "You chose: Red, Blue, teal. You said: hello"

            t, q = await asked("choose: again")
            s.answer(q.id, cancelled=True)  # declined: the agent goes on without an answer
            assert (await t.wait()).stop_reason is ev.StopReason.END_TURN
            assert rec.text().endswith("teal. You said: hello" + "You said: again")

            t, q = await asked("choose: never")
            s.cancel()  # the agent hears `cancel` and ends its turn cancelled
            assert (await t.wait()).stop_reason is ev.StopReason.CANCELLED
            assert "never" not in rec.text()
        await wait_gone(tag)


async def test_cancel_against_an_agent_that_ignores_it_is_bounded(tmp_path: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, cancel_grace_s=0.5)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            t = s.start_turn([TextContent(text="text:1 hang")])
            await rec.until("c0")
            s.cancel()
            with trio.fail_after(3):
                assert (await t.wait()).stop_reason is ev.StopReason.CANCELLED
            assert (await turn(s, "text:2")).stop_reason is ev.StopReason.END_TURN
        await wait_gone(tag)


# -- crash and restart ------------------------------------------------------------------------


@pytest.mark.parametrize("load", [True, False])
async def test_restart_after_a_crash_loads_the_session_when_the_agent_can(tmp_path: Path, load: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    tag = marker()
    state = tmp_path / "agent-state"
    state.mkdir()
    flags = ["--state", str(state), *(["--load-session"] if load else [])]
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, *flags)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            assert (await turn(s, "remember:banana pid")).stop_reason is ev.StopReason.END_TURN
            first_ref = s.record.back_ref
            assert first_ref is not None
            pid = int(rec.text().split("pid=")[1])
            t = s.start_turn([TextContent(text="slow")])
            await rec.until("tick1")
            os.kill(pid, signal.SIGKILL)
            ended = await t.wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.message == "route r: the agent was killed by SIGKILL during the turn"
            assert (await turn(s, "recall")).stop_reason is ev.StopReason.END_TURN
            if load:
                assert "memory=banana" in rec.text()
                assert s.record.back_ref == first_ref
                assert "(replayed banana)" not in rec.text()  # the replay is swallowed
                assert not [e for e in rec.events if isinstance(e, ev.MessageChunk) and "remember:" in e.content.text]  # type: ignore[union-attr]
            else:
                assert "memory=" in rec.text() and "memory=banana" not in rec.text()
                assert s.record.back_ref != first_ref
                assert "cannot load sessions" in caplog.text
        await wait_gone(tag)


async def test_agent_options_reach_the_session_and_survive_a_restart(tmp_path: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, "--config", "--modes", "--commands")}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            rec = Recorder(s)
            assert (await turn(s, "text:1")).stop_reason is ev.StopReason.END_TURN
            assert {o.id: o.current for o in s.config_options()} == {"model": "small", "mode": "code"}
            assert rec.of(ev.OptionsChanged)[-1].options == s.config_options()
            await rec.wait_for(lambda: rec.of(ev.CommandsAvailable))  # sent just after session/new, maybe after the turn
            assert rec.of(ev.CommandsAvailable)[-1].commands[0].name == "review"
            assert m.back_for("r").info.commands[0].name == "review"  # a later session hears them at once
            await s.set_option("model", "large")
            await s.set_option("mode", "ask")  # the agent's session modes, through session/set_mode
            assert {o.id: o.current for o in rec.of(ev.OptionsChanged)[-1].options} == {"model": "large", "mode": "ask"}
            assert (await turn(s, "model")).stop_reason is ev.StopReason.END_TURN
            assert "model=large|mode=ask" in rec.text()
            with pytest.raises(Exception, match="not a value"):
                await s.set_option("model", "huge")
            assert (await turn(s, "crash")).stop_reason is ev.StopReason.FAILED
            assert (await turn(s, "model")).stop_reason is ev.StopReason.END_TURN
            assert rec.text().endswith("model=large|mode=ask")  # the new agent got the user's choices
            assert {o.id: o.current for o in s.config_options()} == {"model": "large", "mode": "ask"}
        await wait_gone(tag)


# -- one agent for many sessions --------------------------------------------------------------


async def test_multiplex_shares_one_agent_and_routes_updates_by_session(tmp_path: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, multiplex=True)}) as m:
            a, b = await m.create("r", cwd=str(tmp_path)), await m.create("r", cwd=str(tmp_path))
            ra, rb = Recorder(a), Recorder(b)
            async with trio.open_nursery() as n:
                n.start_soon(turn, a, "pid remember:apple text:30 recall")
                n.start_soon(turn, b, "pid remember:pear text:30 recall")
            assert ra.text().split("pid=")[1][:6] == rb.text().split("pid=")[1][:6]
            assert len(live_pids(tag)) == 1
            assert "memory=apple" in ra.text() and "pear" not in ra.text()
            assert "memory=pear" in rb.text() and "apple" not in rb.text()
            assert ra.text().count("c29") == 1 and rb.text().count("c29") == 1
            await a.close()
            await trio.sleep(0.3)
            assert len(live_pids(tag)) == 1  # still serving b
            assert (await turn(b, "text:1")).stop_reason is ev.StopReason.END_TURN
            await b.close()
            await wait_gone(tag)  # the last session out ends it


@pytest.mark.parametrize("multiplex", [False, True])
async def test_closing_a_session_sends_session_close_when_the_agent_has_it(tmp_path: Path, multiplex: bool) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, "--close", "--state", str(tmp_path), multiplex=multiplex)}) as m:
            s = await m.create("r", cwd=str(tmp_path))
            assert (await turn(s, "text:1")).stop_reason is ev.StopReason.END_TURN
            agent_sid = s.record.back_ref
            await s.close()
            await wait_gone(tag)
            assert (tmp_path / f"closed-{agent_sid}").exists()


# -- the route's own files and terminals --------------------------------------------------------


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "out-link").symlink_to(tmp_path / "secret.txt")
    (root / "in-link").symlink_to(root / "a.txt")
    return root


async def test_route_serves_files_confined_to_its_cwd(tmp_path: Path, workdir: Path) -> None:
    tag = marker()
    w = str(workdir)
    prompt = " ".join(
        [
            f"caps read:{w}/a.txt read:{w}/in-link write:{w}/sub/new.txt read:{w}/sub/new.txt",
            f"read:{w}/../secret.txt read:{w}/out-link read:{tmp_path}/secret.txt read:/etc/hostname",
            f"write:{w}/../evil.txt write:{w}/out-link read:{w}/missing.txt",
        ]
    )
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, cwd=w, fs="cwd")}) as m:
            s = await m.create("r", cwd="/")
            rec = Recorder(s)
            assert (await turn(s, prompt)).stop_reason is ev.StopReason.END_TURN
            text = rec.text()
            assert '"readTextFile": true' in text and '"writeTextFile": true' in text and '"terminal": false' in text
            assert text.count("read=inside") == 2
            assert "wrote" in text and "read=written by agent" in text
            assert (workdir / "sub" / "new.txt").read_text() == "written by agent"
            assert text.count("read-error=-32602") == 4  # Forbidden: "..", a symlink out, absolute paths elsewhere
            assert text.count("write-error=-32602") == 2
            assert "read-error=-32002" in text  # a missing file inside is "not found"
            assert not (tmp_path / "evil.txt").exists() and (tmp_path / "secret.txt").read_text() == "outside"
        async with runtime({"r": route(tag, cwd=w, fs="read")}) as m:
            s = await m.create("r", cwd="/")
            rec = Recorder(s)
            assert (await turn(s, f"caps write:{w}/b.txt read:{w}/a.txt")).stop_reason is ev.StopReason.END_TURN
            assert '"writeTextFile": false' in rec.text() and "write-error=-32602" in rec.text() and "read=inside" in rec.text()
        await wait_gone(tag)


async def test_route_refuses_fifos_and_directories_and_goes_on_serving(tmp_path: Path, workdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 13, finding 7: 50 reads of a FIFO at once are refused (they blocked threads for
    ever), a directory is invalid params (it was -32603 and a traceback), a file still reads."""
    tag = marker()
    w = str(workdir)
    os.mkfifo(workdir / "pipe")
    with trio.fail_after(CEILING_S):
        async with runtime({"r": oversized_route(tag, cwd=w, fs="cwd", max_frame_bytes=1 << 20)}) as m:
            s = await m.create("r", cwd="/")
            rec = Recorder(s)
            prompt = f"fifo:{w}/pipe:50 read:{w}/sub write:{w}/pipe write:{w}/sub read:{w}/a.txt"
            assert (await turn(s, prompt)).stop_reason is ev.StopReason.END_TURN
            text = rec.text()
            assert "fifo=" + ",".join(["-32602"] * 50) in text
            assert "read-error=-32602" in text and text.count("write-error=-32602") == 2 and "read=inside" in text
            assert "Traceback" not in caplog.text and "not a regular file" in caplog.text
        await wait_gone(tag)


async def test_route_serves_terminals_in_its_cwd_with_an_output_limit(tmp_path: Path, workdir: Path) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, cwd=str(workdir), terminal=True)}) as m:
            s = await m.create("r", cwd="/")
            rec = Recorder(s)
            ended = await turn(s, "caps term:pwd term:sh,-c,exit${IFS}7 term:seq,1,3000 term:/nonexistent-cmd")
            assert ended.stop_reason is ev.StopReason.END_TURN
            text = rec.text()
            assert '"terminal": true' in text
            assert f"term=0|False|{os.path.realpath(workdir)}\n" in text
            assert "term=7|False|" in text
            big = text.split("term=0|True|")[1].split("term-error")[0]
            assert len(big.encode()) <= 2048 and big.endswith("2999\n3000\n")  # the oldest output went first
            assert "term-error=-32602" in text
        await wait_gone(tag)


# -- environment, cwd, MCP servers, authenticate ---------------------------------------------------


async def test_agent_gets_cwd_mcp_servers_and_authenticates(tmp_path: Path) -> None:
    tag = marker()
    back = {
        "auth_method": "agent-login",
        "mcp_servers": [{"name": "files", "command": "mcp-files"}, {"name": "docs", "type": "http", "url": "http://127.0.0.1:1/mcp"}],
    }
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag, **back)}) as m:
            s = await m.create("r", cwd=str(tmp_path), meta={"mcpServers": [{"name": "editor", "command": "x", "args": [], "env": []}]})
            rec = Recorder(s)
            assert (await turn(s, "cwd mcp auth")).stop_reason is ev.StopReason.END_TURN
            assert f"cwd={tmp_path}|{tmp_path}" in rec.text()
            assert "mcp=files,docs,editor" in rec.text()
            assert "auth=agent-login" in rec.text()
        await wait_gone(tag)


# -- the daemon stops -------------------------------------------------------------------------


async def test_daemon_stop_mid_turn_leaves_no_process(tmp_path: Path) -> None:
    tag = marker()
    children: list[int] = []
    with trio.fail_after(CEILING_S):
        async with runtime({"r": route(tag), "m": route(tag, multiplex=True)}) as m:
            for name in ("r", "r", "m", "m"):
                s = await m.create(name, cwd=str(tmp_path))
                rec = Recorder(s)
                assert (await turn(s, "child")).stop_reason is ev.StopReason.END_TURN
                children.append(int(rec.text().split("child=")[1]))
                s.start_turn([TextContent(text="slow")])
                await rec.until("tick1")
            assert len(live_pids(tag)) == 3 and all(pid_alive(c) for c in children)
        await wait_gone(tag, children)


# -- the agent withdraws a request of its own ------------------------------------------------------


async def test_the_agents_cancel_request_stops_a_forwarded_call_answered_32800() -> None:
    """ACP schema, `$/cancel_request`: a forwarded `fs/*` call the agent withdraws stops
    (and is withdrawn from the editor in turn), answered -32800; the agent's other
    requests go on. The process's pipes are memory streams here."""
    import json

    import trio.testing

    from bridge.backs.acp.config import AcpBackConfig
    from bridge.backs.acp.process import AgentProcess
    from bridge.schema import acp
    from bridge.transport.ndjson import NdjsonConnection

    quiet = logging.getLogger("test.acp_back")
    to_agent, from_back = trio.testing.memory_stream_one_way_pair()
    to_editor, at_editor = trio.testing.memory_stream_one_way_pair()
    editor = NdjsonConnection(to_editor, max_outbox_items=64, log=quiet)  # the front's side

    class Forwarding:
        session_id = "b1"

        async def on_call(self, method: str, params: Any) -> Any:
            if method == "fs/write_text_file":
                return {}
            return await editor.request(method, {"sessionId": "b1"}, timeout_s=30)

    async def frames(stream: Any, n: int) -> list[dict[str, Any]]:
        buf = b""
        while buf.count(b"\n") < n:
            buf += await stream.receive_some()
        return [json.loads(line) for line in buf.splitlines()]

    cfg = AcpBackConfig(command=["agent"])
    proc = AgentProcess(route="r", cfg=cfg, argv=["agent"], env={}, cwd=None, client_caps=acp.ClientCapabilities(), owner="t")
    proc._conn = NdjsonConnection(to_agent, max_outbox_items=64, log=quiet)
    proc.sessions["a1"] = Forwarding()  # type: ignore[assignment]
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            proc._nursery = nursery
            nursery.start_soon(proc._conn.write_loop)
            nursery.start_soon(editor.write_loop)
            proc._frame(b'{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{"sessionId":"a1","path":"/x"}}')
            (forwarded,) = await frames(at_editor, 1)
            assert forwarded["method"] == "fs/read_text_file"
            proc._frame(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":5}}')
            proc._frame(b'{"jsonrpc":"2.0","id":6,"method":"fs/write_text_file","params":{"sessionId":"a1"}}')
            answers = {m["id"]: m for m in await frames(from_back, 2)}
            assert answers[5]["error"]["code"] == -32800, answers
            assert answers[6]["result"] == {}
            (withdrawn,) = await frames(at_editor, 1)
            assert withdrawn == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": forwarded["id"]}}
            assert proc._calls == 0
            nursery.cancel_scope.cancel()


# -- the head of an oversized line (sans-I/O) ----------------------------------------------------


def test_an_oversized_line_keeps_only_its_head_and_is_seen_before_it_ends() -> None:
    from bridge.codecs.ndjson import HEAD_BYTES, LineReader

    r = LineReader(1024)
    start = b'{"jsonrpc":"2.0","id":7,"result":"'
    assert r.feed(start + b"x" * 5000) == [] and len(r._buf) == 0
    big = r.overflowing
    assert big is not None and big.size > 1024 and big.head.startswith(b'{"jsonrpc":"2.0","id":7,')
    assert len(big.head) <= HEAD_BYTES
    r.feed(b"x" * 100_000)
    assert r.overflowing is not None and len(r._buf) == 0  # nothing kept while it runs on
    (done, ok) = r.feed(b'"}\n{"id":1}\n')
    assert r.overflowing is None and ok == b'{"id":1}'
    assert done.size == len(start) + 105_002 and done.head == big.head  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("head", "seen"),
    [
        (b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","_meta":{"pad":"xxx', {"id": 3}),
        (b'{"result":{"id":9,"a":[1,{"id":4}]},"id":7,"x":"', {"id": 7}),
        (b'{"method":"session/update","params":{"sessionId":"s1","update":{"id":5,"t":"xx', {"method": "session/update", "sessionId": "s1"}),
        (b'{"params":[{"sessionId":"q"},"z"],"id":4,"more":"', {"id": 4}),
        (b'{"id":12,"method":"fs/write_text_file","params":{"sessionId":"s","content":"xx', {"id": 12, "method": "fs/write_text_file", "sessionId": "s"}),
        (b'{"id":123', {}),  # the last token may be cut short
        (b'xxxxxxxx', {}),
        (b'"' * 4000, {}),
        (b'{"id":"\xff\xfe","x":"', {}),  # not UTF-8: nothing is taken from it
    ],
)
def test_what_an_oversized_line_was_is_read_from_its_head(head: bytes, seen: dict[str, Any]) -> None:
    from bridge.codecs.jsonrpc_sniff import sniff_head

    assert sniff_head(head) == seen
