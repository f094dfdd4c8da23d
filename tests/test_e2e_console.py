"""The web console in a real Chromium (Debian's, driven by Playwright) against the real daemon.

One daemon serves every test here: the demo route, the team's MCP prompts server
(tests/peers/mcp_prompts_server.py, the official `mcp` SDK) as a prompt source, and the
ACP socket for the official ACP SDK client (tests/peers/acp_sdk_client.py). A second one
has a `[ws]` token. The tests use the console as a person would (roles and labels, which
are also what a screen reader reads) and check what it shows against the daemon's own
record of the session (the canonical events from the REST API). Screenshots of the main
views go to test-artifacts/console/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import ARTIFACTS, Api, Relay, Served, launch, serve
from daemon_support import ACP_SDK_CLIENT
from mcp_support import TEAM_PROMPTS, Control, config_text

from playwright.sync_api import Browser, Page, expect, sync_playwright

TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


def _config(tmp: Path, extra: str = "") -> str:
    Control(tmp / "team.json", TEAM_PROMPTS)
    head = f'[server]\nlisten = "127.0.0.1:0"\ngraceful_timeout_s = 2\n\n[daemon]\nacp_socket = "{tmp}/run/acp.sock"\n\n'
    return head + extra + config_text(team_control=tmp / "team.json", listen=False)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("console")
    with serve(tmp, _config(tmp)) as served:
        yield served


@pytest.fixture()
def api(daemon: Served) -> Iterator[Api]:
    client = Api(daemon.url)
    yield client
    client.close()


class Console:
    """A browser tab on the console, failing the test on any uncaught script error."""

    def __init__(self, browser: Browser, url: str, **context: Any) -> None:
        self.url = url
        self.context = browser.new_context(**context)
        self.page: Page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def open(self, fragment: str = "#/") -> Page:
        self.page.goto(f"{self.url}/{fragment}")
        return self.page

    def view(self, name: str) -> None:
        expect(self.page.locator("html")).to_have_attribute("data-view", name)

    def new_session(self, route: str = "demo") -> str:
        self.open("#/new")
        form = self.page.get_by_role("form", name="New session")
        form.get_by_label("Route").select_option(route)
        form.get_by_role("button", name="Start").click()
        self.page.wait_for_url(re.compile(r"#/s/"))
        self.view("session")
        return self.page.url.split("#/s/", 1)[1]

    def send(self, text: str) -> None:
        box = self.page.get_by_role("form", name="Prompt").get_by_label("Message")
        box.fill(text)
        box.press("Enter")

    @property
    def transcript(self) -> Any:
        return self.page.get_by_role("log", name="Transcript")

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
        assert not self.errors, f"the console raised: {self.errors}"


@pytest.fixture()
def console(browser: Browser, daemon: Served) -> Iterator[Console]:
    tab = Console(browser, daemon.url, viewport={"width": 1280, "height": 900})
    yield tab
    tab.close()


def _text_of(events: list[dict[str, Any]], *, parent: bool = False) -> str:
    """The agent's answer text in stored events (not thoughts, not a sub-agent's)."""
    return "".join(
        e["content"]["text"]
        for e in events
        if e["event"] == "message_chunk" and not e.get("thought") and e["content"].get("type") == "text"
        and bool(e.get("parent_tool_call_id")) == parent
    )  # fmt: skip


def test_a_whole_demo_turn_driven_from_the_console(console: Console, api: Api) -> None:
    """New session on the demo route; the slash commands (the MCP prompts included, with
    their hints); `all: hello` shows its plan, tool call with location, permission
    question (answered in place by kind), the diff, the sub-agent nested under its tool
    call, usage, the final text and the stop reason; then a multi-select question with
    free text."""
    session_id = console.new_session()
    page = console.page
    expect(page.locator("[data-field=route]")).to_have_text("demo")
    expect(page.locator("[data-field=back]")).to_have_text("demo")
    expect(page.locator("[data-field=front]")).to_have_text(re.compile("chat|console|rest", re.I))

    box = page.get_by_role("form", name="Prompt").get_by_label("Message")
    box.fill("/")
    commands = page.get_by_role("listbox", name="Commands")
    expect(commands).to_contain_text("/greet")  # the team's MCP prompt
    expect(commands).to_contain_text("<who>")  # its argument hint
    expect(commands).to_contain_text("/review")  # a template of the config

    console.send("all: hello")
    log = console.transcript
    question = log.get_by_role("form", name="Question")
    expect(question).to_be_visible()
    expect(question.locator("button[data-kind]")).to_have_count(4)
    plan = log.get_by_role("list", name="Plan").last
    expect(plan.locator("li").first).to_have_attribute("data-status", "completed")  # think, plan, tool done
    read = log.locator("article.tool[data-kind=read]").first
    expect(read).to_have_attribute("data-status", "completed")
    expect(read.locator(".locations li")).to_contain_text("README.md")
    console.screenshot("question")
    question.get_by_role("button", name="Allow", exact=True).click()
    expect(log.locator(".stop").last).to_contain_text("end_turn")
    expect(log.locator(".answered").first).to_contain_text("Allow")

    edit = log.locator("article.tool[data-kind=edit]").first
    expect(edit.locator("pre.diff .add").first).to_contain_text("hello")
    agent = log.locator("article.tool[data-kind=think]").first
    expect(agent.locator(".subagent")).to_contain_text("The sub-agent read README.md.")
    expect(agent.locator(".subagent article.tool[data-kind=read]")).to_have_count(1)  # nested, not at the top
    thought = log.locator("details.thought").first
    expect(thought).not_to_have_attribute("open", "")  # collapsed
    expect(log.locator(".usage").last).not_to_be_empty()
    expect(log.locator(".text").last).to_contain_text("You said: hello")
    expect(page.locator("[data-field=status]")).to_have_text(re.compile("completed"))

    # What the page shows is what the daemon stored.
    events = api.events(session_id)
    assert log.get_attribute("data-last-seq") == str(events[-1]["seq"])
    assert "You said: hello" in _text_of(events)
    console.screenshot("session")

    console.send("choose: colours")
    question = log.get_by_role("form", name="Question")
    question.get_by_label("Red").check()
    question.get_by_label("Blue").check()
    question.get_by_label("Answer").fill("teal")
    question.get_by_role("button", name="Submit").click()
    expect(log.locator(".stop").last).to_contain_text("end_turn")
    expect(log.locator(".text").last).to_contain_text("You chose: Red, Blue, teal.")


def test_cancel_a_slow_turn(console: Console, api: Api) -> None:
    session_id = console.new_session()
    console.send("slow: take your time")
    log = console.transcript
    expect(log.locator(".text").last).to_contain_text("tick 3.")
    cancel = console.page.get_by_role("form", name="Prompt").get_by_role("button", name="Cancel")
    expect(cancel).to_be_enabled()
    cancel.click()
    expect(log.locator(".stop").last).to_contain_text("cancelled")
    expect(cancel).to_be_disabled()
    assert api.json("GET", f"/api/sessions/{session_id}")["status"] == "interrupted"


def test_reload_mid_turn_shows_every_event_once(browser: Browser, daemon: Served, api: Api) -> None:
    """Reloading the page mid-turn, and a network drop, leave no gap and no repeat: the
    ticks of a `slow:` turn read 1, 2, 3 ... as the daemon stored them."""
    relay = Relay(daemon.url)
    console = Console(browser, relay.url)
    try:
        _reload_and_drop(console, relay, api)
    finally:
        console.close()
        relay.close()


def _reload_and_drop(console: Console, relay: Relay, api: Api) -> None:
    session_id = console.new_session()
    console.send("slow: through a reload")
    log = console.transcript
    expect(log.locator(".text").last).to_contain_text("tick 5.")
    console.page.reload()
    console.view("session")
    expect(console.page.locator("html")).to_have_attribute("data-transcript", "shown")
    expect(log.locator(".text").last).to_contain_text("tick 20.")

    # A network drop: every connection of the page is reset; it resumes where it was.
    seen = int(log.get_attribute("data-last-seq") or 0)
    relay.cut()
    expect(log.locator(".text").last).to_contain_text(f"tick {seen + 15}.")  # ticks are about one event each
    expect(log).to_have_attribute("data-connection", "live")
    console.page.get_by_role("form", name="Prompt").get_by_role("button", name="Cancel").click()
    expect(log.locator(".stop").last).to_contain_text("cancelled")

    shown = log.locator(".text").last.inner_text()
    ticks = [int(n) for n in re.findall(r"tick (\d+)\.", shown)]
    assert ticks == list(range(1, len(ticks) + 1)), ticks
    events = api.events(session_id)
    assert ticks == [int(n) for n in re.findall(r"tick (\d+)\.", _text_of(events))]
    assert log.get_attribute("data-last-seq") == str(events[-1]["seq"])


def test_a_long_session_shows_its_newest_turns_first(console: Console, api: Api) -> None:
    """45 turns: the page shows the newest 20, then 20 more and the last 5 with "Load
    earlier", in order, and no button once there is nothing earlier."""
    session_id = api.json("POST", "/api/sessions", {"route": "demo"})["session_id"]
    for i in range(45):
        api.json("POST", f"/api/sessions/{session_id}/prompt", {"text": f"turn {i}"})
        api.wait_status(session_id, {"completed"})
    console.open(f"#/s/{session_id}")
    turns = console.transcript.locator("section.turn")
    earlier = console.page.get_by_role("button", name="Load earlier")
    expect(turns).to_have_count(20)
    for shown in (40, 45):
        earlier.click()
        expect(turns).to_have_count(shown)
    expect(earlier).to_be_hidden()
    prompts = turns.locator(".prompt").all_inner_texts()
    assert [p.strip() for p in prompts] == [f"turn {i}" for i in range(45)]


def test_an_acp_session_appears_and_streams_live(console: Console, daemon: Served, tmp_path: Path) -> None:
    """An editor (the official ACP SDK client, through `agent-bridge acp --connect`) opens a
    session: it appears in the open list without a reload, its turn streams into the
    page live, and the console's Cancel ends the editor's prompt."""
    page = console.open("#/")
    console.view("sessions")
    page.get_by_label("Protocol").select_option("acp")
    rows = page.get_by_role("table", name="Sessions").locator("tr[data-session-id]")
    expect(rows).to_have_count(0)  # the first ACP session of this daemon is yet to come
    assert daemon.acp_socket is not None
    shim = [str(Path(sys.executable).with_name("agent-bridge")), "acp", "demo", "--connect", daemon.acp_socket]
    opts = {"cwd": str(tmp_path), "timeout_s": 60, "stderr": str(tmp_path / "shim.log")}
    editor = subprocess.Popen(
        [sys.executable, str(ACP_SDK_CLIENT), "watched", json.dumps(opts), *shim], stdout=subprocess.PIPE
    )
    try:
        expect(rows).to_have_count(1)
        row = page.locator("tr[data-session-id][data-front=acp][data-status=running]").first
        expect(row).to_be_visible()
        console.screenshot("sessions")
        row.get_by_role("link").click()
        console.view("session")
        expect(page.locator("[data-field=front]")).to_have_text("acp")
        log = console.transcript
        expect(log).to_have_attribute("data-connection", "live")
        expect(log.locator(".text").last).to_contain_text("tick 3.")
        seen = int(log.get_attribute("data-last-seq") or 0)
        expect(log.locator(".text").last).to_contain_text("tick 8.")  # still streaming, live
        assert int(log.get_attribute("data-last-seq") or 0) > seen
        page.get_by_role("form", name="Prompt").get_by_role("button", name="Cancel").click()
        out, _ = editor.communicate(timeout=60)
    finally:
        if editor.poll() is None:
            editor.kill()
            editor.wait()
    report = json.loads(out)
    assert "crash" not in report, report["crash"]
    assert report["results"]["prompt"] == {"result": {"stopReason": "cancelled"}}, report["results"]
    expect(console.transcript.locator(".stop").last).to_contain_text("cancelled")


def test_overview_and_a_phone_sized_screen(browser: Browser, daemon: Served, api: Api) -> None:
    """Routes with their back and health, the prompt source, live charts from /metrics;
    then the session view at 390 px wide, driven by keyboard."""
    tab = Console(browser, daemon.url, viewport={"width": 1280, "height": 900})
    try:
        page = tab.open("#/overview")
        tab.view("overview")
        row = page.get_by_role("region", name="Routes").locator("tr[data-route=demo]")
        expect(row).to_have_attribute("data-health", "ok")
        expect(row).to_contain_text("demo")
        expect(page.get_by_role("region", name="Routes")).to_contain_text("team")  # its prompt source
        activity = page.get_by_role("region", name="Activity")
        expect(activity.locator("svg").first).to_be_visible()
        expect(activity.locator("svg title").first).not_to_be_empty()
        tab.screenshot("overview")
    finally:
        tab.close()

    phone = Console(browser, daemon.url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        phone.new_session()
        page = phone.page
        box = page.get_by_role("form", name="Prompt").get_by_label("Message")
        box.focus()
        page.keyboard.type("plan: tool: on a phone")
        page.keyboard.press("Enter")
        expect(phone.transcript.locator(".stop").last).to_contain_text("end_turn")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page scrolls sideways on a phone: {width} px"
        page.keyboard.press("Shift+Tab")  # focus leaves the box for the previous control, visibly
        assert page.evaluate("document.activeElement !== document.querySelector('textarea')")
        phone.screenshot("phone")
    finally:
        phone.close()


def test_with_a_token_the_console_shows_nothing_before_it(browser: Browser, tmp_path: Path) -> None:
    config = _config(tmp_path, '[ws]\ntoken_env = "CONSOLE_TOKEN"\n\n')
    with serve(tmp_path, config, env={"CONSOLE_TOKEN": "s3cret-console"}, name="guarded") as daemon:
        api = Api(daemon.url, token="s3cret-console")
        try:
            known = api.json("POST", "/api/sessions", {"route": "demo", "intent": "a private title"})["session_id"]
        finally:
            api.close()
        tab = Console(browser, daemon.url)
        try:
            page = tab.open("#/")
            tab.view("token")
            form = page.get_by_role("form", name="Access token")
            content = page.content()
            assert known not in content and "a private title" not in content
            form.get_by_label("Token").fill("wrong")
            form.get_by_role("button", name="Sign in").click()
            tab.view("token")
            expect(form).to_be_visible()
            assert known not in page.content()
            form.get_by_label("Token").fill("s3cret-console")
            form.get_by_role("button", name="Sign in").click()
            tab.view("sessions")
            expect(page.locator(f'tr[data-session-id="{known}"]')).to_contain_text("a private title")
            page.reload()  # kept for the browser session ...
            tab.view("sessions")
            assert page.evaluate("Object.keys(localStorage).length") == 0  # ... and only there
            other = Console(browser, daemon.url)  # another browser session asks again
            try:
                other.open("#/")
                other.view("token")
            finally:
                other.close()
        finally:
            tab.close()
