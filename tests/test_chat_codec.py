"""The chat event stream codec, synchronous (no event loop): Blade `api/chat-flow.md` ↔ canonical.

Golden fixtures in `tests/golden/chat/`:
- `forward/*.json`: canonical `events` (their msgspec JSON) and the exact chat `frames`
  the projector must derive from them (with the headless `run_options` and
  `block_max_chars` the case needs);
- `reverse/*.json`: chat `frames` from a chat server (Blade-shaped, `api/chat-flow.md`, `api/types.md`) and the
  canonical `events` a chat back must read from them.
`UPDATE_GOLDEN=1 pytest tests/test_chat_codec.py` rewrites the expected halves from
the inputs; review the diff before keeping it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bridge.codecs import chat_parts as parts
from bridge.codecs.chat import ChatProjector, ChatReader
from bridge.codecs.chat_reader import askuser_answer
from bridge.core import events as ev
from bridge.core.content import EmbeddedResource, ImageContent, ResourceContents, ResourceLink, TextContent
from bridge.errors import InvalidParams, ParseError
from bridge.schema import chat

GOLDEN = Path(__file__).parent / "golden" / "chat"
FORWARD = sorted((GOLDEN / "forward").glob("*.json"))
REVERSE = sorted((GOLDEN / "reverse").glob("*.json"))
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

_events = msgspec.json.Decoder(list[ev.Event])
_enc = msgspec.json.Encoder()


def _projector(case: dict[str, Any], **kw: Any) -> ChatProjector:
    options = case.get("run_options", {})
    return ChatProjector(
        case["session_id"],
        run_options=lambda tid: msgspec.convert(options[tid], chat.RunOptions) if tid in options else None,
        block_max_chars=case.get("block_max_chars", 2048),
        **kw,
    )


def _derive(case: dict[str, Any], **kw: Any) -> list[tuple[int, bytes]]:
    p = _projector(case, **kw)
    return [f for e in _events.decode(json.dumps(case["events"])) for f in p.feed(e)]


def _write(path: Path, case: dict[str, Any]) -> None:
    path.write_text(json.dumps(case, indent=1, ensure_ascii=False) + "\n")


# -- forward: canonical → chat ------------------------------------------------------------


def test_the_fixtures_cover_every_patch_type_and_server_event() -> None:
    patches, events = set(), set()
    for path in FORWARD:
        for f in json.loads(path.read_text())["frames"]:
            events.add(f["event"])
            if f["event"] == "turn:patch":
                patches.add(f["data"]["patch_type"])
    assert patches == {"add_content", "add_tool_call", "tool_result", "set_status", "set_tool_status"}
    assert events == {"chat:start", "turn:start", "turn:patch", "turn:end", "chat:end", "system:error"}


@pytest.mark.parametrize("path", FORWARD, ids=lambda p: p.stem)
def test_forward_golden(path: Path) -> None:
    case = json.loads(path.read_text())
    frames = [json.loads(data) for _, data in _derive(case)]
    if UPDATE:
        _write(path, {**case, "frames": frames})
    assert frames == case["frames"]


@pytest.mark.parametrize("path", FORWARD, ids=lambda p: p.stem)
def test_sequences_are_gapless_and_rederiving_gives_the_same_frames(path: Path) -> None:
    case = json.loads(path.read_text())
    frames = _derive(case)
    assert [seq for seq, _ in frames] == list(range(1, len(frames) + 1))
    for data_seq, data in frames:
        assert json.loads(data)["data"].get("sequence") == data_seq
    for after in range(len(frames) + 1):  # a resume after any frame: exactly the rest, byte for byte
        assert _derive(case, skip_through=after) == frames[after:]


@pytest.mark.parametrize("path", FORWARD, ids=lambda p: p.stem)
def test_server_frames_round_trip_through_the_schema(path: Path) -> None:
    types = {
        "turn:start": chat.TurnProjection,
        "turn:end": chat.TurnProjection,
        "chat:start": chat.ChatStart,
        "chat:end": chat.ChatEnd,
        "system:error": chat.SystemError,
    }
    bodies = {
        "add_content": chat.AddContent,
        "add_tool_call": chat.AddToolCall,
        "tool_result": chat.ToolResult,
        "set_status": chat.SetStatus,
        "set_tool_status": chat.SetToolStatus,
    }
    for f in json.loads(path.read_text())["frames"]:
        raw = json.dumps(f["data"]).encode()
        if f["event"] == "turn:patch":
            env = msgspec.json.decode(raw, type=chat.PatchEnvelope)
            env.data = msgspec.convert(env.data, bodies[env.patch_type])
            decoded: Any = env
        else:
            decoded = msgspec.json.decode(raw, type=types[f["event"]])
        assert json.loads(_enc.encode(decoded)) == f["data"]


def test_a_projection_is_a_snapshot_with_explicit_nulls() -> None:
    case = json.loads((GOLDEN / "forward" / "fork.json").read_text())
    starts = [f["data"] for f in case["frames"] if f["event"] == "turn:start"]
    assert [s["parent_fork_tool_call_id"] for s in starts] == [None, None, "ag"]
    assert all(
        set(s) >= {"turn_id", "loop_id", "role", "status", "blocks", "tool_calls", "usage", "duration_ms"}
        for s in starts
    )


def test_the_transcript_keeps_every_turn_in_start_order_with_final_states() -> None:
    case = json.loads((GOLDEN / "forward" / "fork.json").read_text())
    p = _projector(case, keep_transcript=True, skip_through=float("inf"))
    for e in _events.decode(json.dumps(case["events"])):
        assert p.feed(e) == []  # skipped frames are counted, not encoded
    turns = p.transcript()
    assert [(t.turn_id, t.role, t.status) for t in turns] == [
        ("t1:user", "user", "completed"),
        ("t1:root", "assistant", "completed"),
        ("t1:fork:ag", "assistant", "completed"),
    ]
    assert p.sequence == len(case["frames"])
    child = turns[2]
    assert [b.type for b in child.blocks] == [
        "thinking",
        "tool_use",
        "tool_result",
        "tool_use",
        "ask_user_answer",
        "text",
    ]
    assert child.usage == chat.Usage(input_tokens=2, output_tokens=3)
    assert [t.status for t in child.tool_calls] == ["done", "done"]


def test_question_for_finds_the_open_question_behind_its_tool_call() -> None:
    p = ChatProjector("s")
    q = ev.Question(id="q", kind="choice", prompt="?", options=[ev.QuestionOption(id="a", label="A")])
    p.feed(ev.TurnStarted(turn_id="t", prompt=[TextContent(text="x")]))
    p.feed(ev.QuestionAsked(question=q))
    assert p.question_for("q") == q
    p.feed(ev.QuestionAnswered(question_id="q", selected=["a"]))
    assert p.question_for("q") is None


# -- reverse: chat → canonical --------------------------------------------------------------


@pytest.mark.parametrize("path", REVERSE, ids=lambda p: p.stem)
def test_reverse_golden(path: Path) -> None:
    case = json.loads(path.read_text())
    reader = ChatReader(turn_id=case["turn_id"])
    events = [e for f in case["frames"] for e in reader.feed(json.dumps(f))]
    got = json.loads(_enc.encode(events))
    if UPDATE:
        _write(path, {**case, "events": got})
    assert got == case["events"]


def test_the_reader_remembers_the_last_sequence_and_the_headless_result() -> None:
    case = json.loads((GOLDEN / "reverse" / "failed_and_headless.json").read_text())
    reader = ChatReader()
    for f in case["frames"]:
        reader.feed(json.dumps(f).encode())
    assert reader.result == {"output": {"city": "Paris"}, "schema": {"type": "object"}}
    blade = json.loads((GOLDEN / "reverse" / "blade_fork.json").read_text())
    reader = ChatReader()
    for f in blade["frames"]:
        reader.feed(json.dumps(f))
    assert reader.sequence == max(f["data"].get("sequence") or 0 for f in blade["frames"])


def test_bad_frames_raise_peer_errors() -> None:
    reader = ChatReader()
    with pytest.raises(ParseError):
        reader.feed(b"{nope")
    with pytest.raises(InvalidParams):
        reader.feed(b'{"data": {}}')
    with pytest.raises(InvalidParams):
        reader.feed(
            json.dumps(
                {"event": "turn:patch", "data": {"turn_id": "a", "patch_type": "add_tool_call", "data": {"id": 1}}}
            )
        )


def _through_ws(*events: ev.Event) -> list[ev.Event]:
    """Canonical events → one agent-bridge's /ws frames → another's chat back."""
    p, reader = ChatProjector("s"), ChatReader(turn_id="t")
    frames = [f for e in (ev.TurnStarted(turn_id="t", prompt=[TextContent(text="x")]), *events) for f in p.feed(e)]
    return [e for _, data in frames for e in reader.feed(data)]


def test_a_tool_calls_locations_and_raw_output_cross_two_agent_bridges_as_they_were() -> None:
    where = [ev.ToolLocation(path="notes.txt"), ev.ToolLocation(path="README.md", line=3)]
    back = _through_ws(
        ev.ToolCallStarted(tool_call_id="e", title="Edit notes.txt", kind="edit", raw_input={"path": "notes.txt"}, locations=where),
        ev.ToolCallUpdated(tool_call_id="e", status="failed", raw_output={"rejected": True}),
        ev.ToolCallStarted(tool_call_id="r", title="Run ls", kind="execute", raw_input={"command": "ls"}),
        ev.ToolCallUpdated(
            tool_call_id="r",
            status="completed",
            content=[ev.ToolCallContent(content=TextContent(text="a.py"))],
            raw_output={"exit": 0},
        ),
        ev.ToolCallStarted(tool_call_id="t", title="Think", kind="think"),
        ev.ToolCallUpdated(tool_call_id="t", status="completed", content=[ev.ToolCallContent(content=TextContent(text="ok"))]),
    )
    started = {e.tool_call_id: e for e in back if isinstance(e, ev.ToolCallStarted)}
    ended = {e.tool_call_id: e for e in back if isinstance(e, ev.ToolCallUpdated) and e.status in ("completed", "failed")}
    assert started["e"].locations == where and started["r"].locations is None
    # A result that is only raw output stays raw output: no text the far side would show.
    assert (ended["e"].status, ended["e"].content, ended["e"].raw_output) == ("failed", None, {"rejected": True})
    assert ended["r"].content == [ev.ToolCallContent(content=TextContent(text="a.py"))] and ended["r"].raw_output == {"exit": 0}
    # Text without raw output reads back as before (the text is its raw output too).
    assert ended["t"].raw_output == "ok"


def test_links_and_files_cross_two_agent_bridges_as_they_were() -> None:
    link = ResourceLink(uri="file:///README.md", name="README.md")
    text_file = EmbeddedResource(resource=ResourceContents(uri="attachment:a.txt", text="hi", mime_type="text/plain"))
    blob = EmbeddedResource(resource=ResourceContents(uri="attachment:b.bin", blob="AAE=", mime_type="application/octet-stream"))
    image = ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
    back = _through_ws(*(ev.MessageChunk(content=c, message_id="m") for c in (image, link, text_file, blob)))
    assert [e.content for e in back if isinstance(e, ev.MessageChunk)] == [image, link, text_file, blob]


def _blade_tool(name: str, arguments: dict[str, Any], result: Any = None) -> list[ev.Event]:
    reader = ChatReader(turn_id="t")
    frames = [{"turn_id": "t", "patch_type": "add_tool_call",
               "data": {"id": "c", "tool_name": name, "display_name": name, "arguments": json.dumps(arguments), "status": "pending"}}]  # fmt: skip
    if result is not None:
        frames.append({"turn_id": "t", "patch_type": "tool_result", "data": {"tool_call_id": "c", "result": result, "status": "error"}})
    return [e for f in frames for e in reader.feed(json.dumps({"event": "turn:patch", "data": f}))]


@pytest.mark.parametrize(
    ("name", "arguments", "where"),
    [
        ("Read", {"file_path": "/src/a.py", "offset": 10, "limit": 5}, [ev.ToolLocation(path="/src/a.py", line=10)]),
        ("Read", {"path": "README.md", "line": 1}, [ev.ToolLocation(path="README.md", line=1)]),
        ("Edit", {"file_path": "a.py", "old_string": "x", "new_string": "y"}, [ev.ToolLocation(path="a.py")]),
        ("Write", {"file_path": "b.py", "content": ""}, [ev.ToolLocation(path="b.py")]),
        ("Grep", {"pattern": "TODO", "path": "src"}, [ev.ToolLocation(path="src")]),
        ("Grep", {"pattern": "TODO"}, None),
        ("Bash", {"command": "cat a.py", "path": "a.py"}, None),
        ("Read", {"file_path": "a.py", "offset": True}, [ev.ToolLocation(path="a.py")]),
    ],
)
def test_a_blade_file_tool_gets_locations_from_its_input(name: str, arguments: dict[str, Any], where: Any) -> None:
    (started,) = _blade_tool(name, arguments)
    assert isinstance(started, ev.ToolCallStarted) and started.locations == where


def test_a_blade_tools_non_text_result_stays_text_and_raw_output() -> None:
    _started, ended = _blade_tool("Edit", {"file_path": "a.py"}, {"rejected": True})
    assert isinstance(ended, ev.ToolCallUpdated)
    assert ended.content == [ev.ToolCallContent(content=TextContent(text='{"rejected":true}'))]
    assert ended.raw_output == {"rejected": True}


def _normal(events: list[ev.Event]) -> dict[str, Any]:
    """What must survive canonical → chat → canonical: text per place, tools, questions, plans, stop."""
    text: dict[tuple[str | None, bool], str] = {}
    tools: dict[str, tuple[str | None, str | None]] = {}
    out: dict[str, Any] = {"questions": [], "plans": [], "stop": None}
    for e in events:
        if isinstance(e, ev.MessageChunk) and isinstance(e.content, TextContent):
            key = (e.parent_tool_call_id, e.thought)
            text[key] = text.get(key, "") + e.content.text
        elif isinstance(e, ev.ToolCallStarted):
            tools[e.tool_call_id] = (e.parent_tool_call_id, e.status if e.status in ("completed", "failed") else None)
        elif isinstance(e, ev.ToolCallUpdated) and e.status in ("completed", "failed"):
            tools[e.tool_call_id] = (tools.get(e.tool_call_id, (e.parent_tool_call_id, None))[0], e.status)
        elif isinstance(e, ev.QuestionAsked):
            out["questions"].append((e.question.id, e.parent_tool_call_id, [o.label for o in e.question.options]))
        elif isinstance(e, ev.PlanUpdated):
            out["plans"].append([(p.content, p.status) for p in e.entries])
        elif isinstance(e, ev.TurnEnded):
            out["stop"] = e.stop_reason
    return {**out, "text": text, "tools": tools}


@pytest.mark.parametrize(
    "name",
    [
        "fork",
        "tools",
        "plan",
        "text_and_thinking",
        "question_permission",
        "question_choice_multi",
        "cancelled",
        "failed",
        "artifact",
    ],
)
def test_canonical_to_chat_and_back_keeps_what_matters(name: str) -> None:
    case = json.loads((GOLDEN / "forward" / f"{name}.json").read_text())
    reader = ChatReader(turn_id="t1")
    back = [e for _, data in _derive(case) for e in reader.feed(data)]
    original = [e for e in _events.decode(json.dumps(case["events"])) if not isinstance(e, ev.ArtifactUpdated)]
    if name == "artifact":  # artifacts come back as message text
        assert (
            "".join(
                e.content.text for e in back if isinstance(e, ev.MessageChunk) and isinstance(e.content, TextContent)
            )
            == "part one, part two"
        )
        return
    want, got = _normal(original), _normal(back)
    if want["stop"] in (ev.StopReason.CANCELLED, ev.StopReason.FAILED):
        # The chat stream closes what the run left open (set_tool_status cancelled/error).
        want["tools"] = {k: (parent, status or "failed") for k, (parent, status) in want["tools"].items()}
    assert got["text"] == want["text"]
    assert got["tools"] == want["tools"]
    assert got["plans"] == want["plans"]
    assert [(q[0], q[1], q[2]) for q in got["questions"]] == [(q[0], q[1], q[2]) for q in want["questions"]]
    assert got["stop"] == want["stop"]


# -- AskUserQuestion ---------------------------------------------------------------------------

COLOURS = ev.Question(
    id="q",
    kind="choice",
    prompt="Which?",
    multi_select=True,
    allow_text=True,
    options=[
        ev.QuestionOption(id="r", label="Red"),
        ev.QuestionOption(id="g", label="Green"),
        ev.QuestionOption(id="b", label="Blue"),
    ],
)
PERMISSION = ev.Question(
    id="p",
    kind="permission",
    prompt="Run it?",
    options=[
        ev.QuestionOption(id="allow", label="Allow", kind="allow_once"),
        ev.QuestionOption(id="deny", label="Deny", kind="reject_once"),
    ],
)
FORM = ev.Question(
    id="f",
    kind="form",
    prompt="Settings",
    schema={
        "type": "object",
        "properties": {
            "env": {"enum": ["dev", "prod"]},
            "tags": {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]}},
            "n": {"type": "integer"},
        },
    },
)


def _answer(
    q: ev.Question, selections: dict[str, list[int]] | None = None, custom: dict[str, str] | None = None
) -> dict[str, Any]:
    return parts.answer_from_chat(
        q, chat.AskUserAnswer(tool_call_id=q.id, selections=selections or {}, custom=custom or {})
    )


def test_arguments_follow_the_askuserquestion_shape() -> None:
    args = json.loads(parts.ask_arguments(COLOURS))
    assert args == {
        "questions": [
            {
                "question": "Which?",
                "header": "Question",
                "options": [{"label": "Red"}, {"label": "Green"}, {"label": "Blue"}],
                "multiSelect": True,
            }
        ],
        "agentBridge": {"kind": "choice", "options": [{"id": "r"}, {"id": "g"}, {"id": "b"}], "allowText": True},
    }
    perm = json.loads(parts.ask_arguments(PERMISSION))["questions"][0]
    assert (perm["header"], [o["label"] for o in perm["options"]], perm["multiSelect"]) == (
        "Permission",
        ["Allow", "Deny"],
        False,
    )
    form = json.loads(parts.ask_arguments(FORM))["questions"]
    assert [(q["header"], [o["label"] for o in q["options"]], q["multiSelect"]) for q in form] == [
        ("env", ["dev", "prod"], False),
        ("tags", ["A", "B"], True),
        ("n", [], False),
    ]


def test_single_multi_and_custom_answers() -> None:
    assert _answer(PERMISSION, {"0": [1]}) == {"selected": ["deny"], "text": None}
    assert _answer(COLOURS, {"0": [0, 2]}) == {"selected": ["r", "b"], "text": None}
    assert _answer(COLOURS, custom={"0": "teal"}) == {"selected": [], "text": "teal"}
    assert _answer(COLOURS, {"0": [1]}, {"0": "and teal"}) == {"selected": ["g"], "text": "and teal"}
    assert _answer(FORM, {"0": [1], "1": [0, 1]}, {"2": "3"}) == {"values": {"env": "prod", "tags": ["a", "b"], "n": 3}}


@pytest.mark.parametrize(
    ("q", "selections", "custom", "message"),
    [
        (COLOURS, {}, {}, "question 0: choose an option (selections) or write an answer (custom)"),
        (COLOURS, {}, {"0": ""}, "question 0: choose an option"),
        (COLOURS, {"0": [3]}, {}, "question 0: there is no option 3 (options are 0..2)"),
        (PERMISSION, {"0": [0, 1]}, {}, "question 0 takes one option, got 2"),
        (PERMISSION, {"1": [0]}, {}, "no question '1'"),
        (FORM, {"0": [0]}, {}, "question 1: choose an option"),
    ],
)
def test_answers_that_do_not_fit_are_refused(
    q: ev.Question, selections: dict[str, list[int]], custom: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidParams, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _answer(q, selections, custom)


def test_canonical_answers_map_back_to_selections_and_custom() -> None:
    assert parts.answer_to_chat(COLOURS, ev.QuestionAnswered(question_id="q", selected=["g", "b"], text="x")) == {
        "selections": {"0": [1, 2]},
        "custom": {"0": "x"},
    }
    assert parts.answer_to_chat(
        FORM, ev.QuestionAnswered(question_id="f", values={"env": "dev", "tags": ["b"], "n": 2})
    ) == {"selections": {"0": [0], "1": [1]}, "custom": {"2": "2"}}


def test_a_chat_back_answers_a_question_it_read() -> None:
    args = json.dumps({"questions": [{"question": "DB?", "options": [{"label": "PG"}, {"label": "SQLite"}]}]})
    q = parts.question_from_ask("tc", args)
    assert (q.kind, [o.id for o in q.options], q.allow_text) == ("choice", ["0", "1"], True)
    a = askuser_answer(q, ev.QuestionAnswered(question_id="tc", selected=["1"], text="in memory"))
    assert msgspec.to_builtins(a) == {"tool_call_id": "tc", "selections": {"0": [1]}, "custom": {"0": "in memory"}}
    two = parts.question_from_ask(
        "t2",
        json.dumps(
            {
                "questions": [
                    {"question": "A?", "options": [{"label": "x"}, {"label": "y"}], "multiSelect": True},
                    {"question": "B?"},
                ]
            }
        ),
    )
    assert two.kind == "form"
    a2 = askuser_answer(two, ev.QuestionAnswered(question_id="t2", values={"0": ["y"], "1": "free"}))
    assert msgspec.to_builtins(a2) == {"tool_call_id": "t2", "selections": {"0": [1]}, "custom": {"1": "free"}}


def test_a_question_crosses_two_agent_bridges_with_its_option_ids_kinds_and_tool_call() -> None:
    asked = ev.Question(
        id="m1-edit-q",
        kind="permission",
        prompt="Edit notes.txt?",
        tool_call_id="m1-edit",
        options=[
            ev.QuestionOption(id="allow", label="Allow", kind="allow_once"),
            ev.QuestionOption(id="allow_always", label="Always allow", kind="allow_always"),
            ev.QuestionOption(id="reject", label="Reject", kind="reject_once"),
            ev.QuestionOption(id="reject_always", label="Never allow", kind="reject_always"),
        ],
    )
    q = parts.question_from_ask("m1-edit-q", parts.ask_arguments(asked))
    assert q == asked.__class__(**{**msgspec.structs.asdict(asked), "header": "Permission"})
    # The far side gets back the index of the option picked by id.
    a = askuser_answer(q, ev.QuestionAnswered(question_id=q.id, selected=["reject"]))
    assert parts.answer_from_chat(asked, a) == {"selected": ["reject"], "text": None}
    # An extension that does not fit the questions is ignored, never trusted half-way.
    bad = json.loads(parts.ask_arguments(asked))
    bad["agentBridge"]["options"].pop()
    assert [o.id for o in parts.question_from_ask("x", json.dumps(bad)).options] == ["0", "1", "2", "3"]


def test_a_blade_question_gets_kinds_from_its_labels_and_none_it_cannot_read() -> None:
    args = json.dumps(
        {"questions": [{"question": "Run rm?", "options": [{"label": "Allow"}, {"label": "Deny"}, {"label": "Ask me later"}]}]}
    )
    q = parts.question_from_ask("tc", args)
    assert [(o.id, o.kind) for o in q.options] == [("0", "allow_once"), ("1", "reject_once"), ("2", None)]
    # One option the words cannot read: still a choice with free text, never a permission.
    assert (q.kind, q.allow_text) == ("choice", True)


def _blade_ask(labels: list[str], multi: bool = False) -> ev.Question:
    options = [{"label": label} for label in labels]
    return parts.question_from_ask("tc", json.dumps({"questions": [{"question": "Edit?", "options": options, "multiSelect": multi}]}))


def test_a_blade_question_whose_every_option_reads_as_allow_or_reject_is_a_permission() -> None:
    q = _blade_ask(["Allow", "Always allow", "Reject", "Never allow"])
    assert (q.kind, q.allow_text, q.multi_select) == ("permission", False, False)
    assert [(o.id, o.label, o.kind) for o in q.options] == [
        ("0", "Allow", "allow_once"),
        ("1", "Always allow", "allow_always"),
        ("2", "Reject", "reject_once"),
        ("3", "Never allow", "reject_always"),
    ]
    # Its answer still goes back as the option's index.
    a = askuser_answer(q, ev.QuestionAnswered(question_id="tc", selected=["3"]))
    assert msgspec.to_builtins(a) == {"tool_call_id": "tc", "selections": {"0": [3]}}
    # Not a permission: only allows, only rejects, or several picks.
    assert _blade_ask(["Yes", "Always allow"]).kind == "choice"
    assert _blade_ask(["Reject", "Never allow"]).kind == "choice"
    assert _blade_ask(["Allow", "Reject"], multi=True).kind == "choice"


# -- content --------------------------------------------------------------------------------


def test_message_items_become_content_blocks() -> None:
    items = msgspec.convert(
        [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            {"type": "file", "name": "notes.txt", "data": "aGk="},
        ],
        list[chat.MessageItem],
    )
    got = parts.message_to_content(items)
    assert got == [
        TextContent(text="see"),
        ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
        ResourceLink(uri="https://example.com/cat.jpg", name="cat.jpg"),
        EmbeddedResource(resource=ResourceContents(uri="attachment:notes.txt", blob="aGk=", mime_type="text/plain")),
    ]
    assert parts.message_to_content("hi") == [TextContent(text="hi")]
    assert parts.message_to_content("") == []
    blocks = parts.blocks_of_prompt(got)
    assert [(b.type, b.content if b.type != "file" else b.content["name"]) for b in blocks] == [
        ("text", "see"),
        ("image_url", "data:image/png;base64,iVBORw0KGgo="),
        ("resource_link", {"uri": "https://example.com/cat.jpg", "name": "cat.jpg"}),
        ("file", "notes.txt"),
    ]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}},
            r"\$\.message\[0\]\.image_url\.url: not valid base64",
        ),
        ({"type": "image_url", "image_url": {"url": "data:image/png,raw"}}, "must be base64"),
        ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "expected a data: URL"),
        ({"type": "file", "name": "a", "data": "***"}, r"\$\.message\[0\]\.data: not valid base64"),
    ],
)
def test_bad_items_are_refused_with_their_path(item: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidParams, match=message):
        parts.message_to_content(msgspec.convert([item], list[chat.MessageItem]))


# -- headless ----------------------------------------------------------------------------------

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}


def test_headless_without_a_schema_returns_the_text() -> None:
    assert parts.headless_result("Paris", chat.RunOptions(headless=True)) == (True, {"output": "Paris"})


@pytest.mark.parametrize(
    "text", ['{"city": "Paris"}', 'Here: {"city": "Paris"} done', '```json\n{"city": "Paris"}\n```']
)
def test_headless_output_is_parsed_and_validated(text: str) -> None:
    assert parts.headless_result(text, chat.RunOptions(output_schema=CITY)) == (
        True,
        {"output": {"city": "Paris"}, "schema": CITY},
    )


def test_a_mismatch_says_what_did_not_match() -> None:
    ok, result = parts.headless_result('{"city": 3, "n": 0}', chat.RunOptions(output_schema=CITY))
    assert not ok
    assert result["errors"] == ["$.city: 3 is not of type 'string'", "$.n: 0 is less than the minimum of 1"]
    assert result["error"].startswith("the output does not match output_schema: $.city")
    ok, result = parts.headless_result("no json here", chat.RunOptions(output_schema=CITY))
    assert not ok and result["error"].startswith("the output is not JSON")


def test_an_invalid_output_schema_is_refused() -> None:
    parts.check_output_schema(CITY)
    with pytest.raises(InvalidParams, match=r"\$\.output_schema\.properties\.city\.type: not a valid JSON Schema"):
        parts.check_output_schema({"type": "object", "properties": {"city": {"type": "text"}}})


# -- client frames ---------------------------------------------------------------------------


def test_client_frames_decode_in_two_steps() -> None:
    frame = msgspec.json.decode(
        b'{"event":"chat:send","data":{"session_id":"s","message":[{"type":"text","text":"hi"}],"askuser_answer":{"tool_call_id":"t","selections":{"0":[1]}},"extra":1},"auth":{"token":"x"}}',
        type=chat.ClientFrame,
    )
    assert frame.event == "chat:send" and frame.auth is not None and "x" not in repr(frame.auth)
    send = msgspec.json.decode(frame.data, type=chat.CLIENT_EVENTS[frame.event])  # type: ignore[arg-type]
    assert send.message == [chat.TextItem(text="hi")] and send.askuser_answer.selections == {"0": [1]}  # type: ignore[union-attr]
    with pytest.raises(msgspec.ValidationError, match=r"\$\.after_sequence"):
        msgspec.json.decode(b'{"session_id":"s","after_sequence":-1}', type=chat.Subscribe)
