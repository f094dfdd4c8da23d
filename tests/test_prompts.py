"""Slash commands without a network: naming and clashes, hints, argument parsing
(positional, key=value, quotes), templates, splicing, the registry's resolution, the
session hook (no turn starts on a refused command), the config checks, and that a
route without MCP sources never loads the `mcp` SDK.

The MCP sources themselves (real servers) are in tests/test_e2e_mcp.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import msgspec
import pytest
import trio

from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core import events as ev
from bridge.core.content import EmbeddedResource, ImageContent, TextContent
from bridge.errors import ConfigError, InvalidParams
from bridge.prompts.config import PromptTemplate
from bridge.prompts.registry import PromptRegistry
from bridge.prompts.text import (
    PromptArg,
    PromptSpec,
    Provider,
    assign_names,
    hint_of,
    parse_arguments,
    parse_invocation,
    render_template,
    splice,
)
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore

CEILING_S = 10

REVIEW = PromptSpec(
    name="review",
    description="Review code",
    arguments=(PromptArg(name="focus", required=True), PromptArg(name="language"), PromptArg(name="notes")),
)


def args(line: str, spec: PromptSpec = REVIEW) -> dict[str, str]:
    return parse_arguments(line, spec, f"/{spec.name} {hint_of(spec) or ''}".strip())


# -- invocation and arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/review bugs", ("review", "bugs", "")),
        ("  /review   bugs  ", ("review", "bugs", "")),
        ("/review bugs\nsecond line\nthird", ("review", "bugs", "second line\nthird")),
        ("/ev:args-prompt Paris", ("ev:args-prompt", "Paris", "")),
        ("/review", ("review", "", "")),
        ("/usr/bin/env is broken", None),  # a path, not a command
        ("review bugs", None),
        ("please /review", None),
        ("/", None),
    ],
)
def test_parse_invocation(text: str, expected: tuple[str, str, str] | None) -> None:
    assert parse_invocation(text) == expected


def test_arguments_positional_in_declared_order() -> None:
    assert args("bugs python") == {"focus": "bugs", "language": "python"}


def test_the_last_positional_argument_takes_the_rest_of_the_line() -> None:
    assert args("bugs python look at the login form") == {
        "focus": "bugs",
        "language": "python",
        "notes": "look at the login form",
    }


def test_arguments_by_name_and_positional_fill_the_others() -> None:
    assert args("language=rust bugs") == {"language": "rust", "focus": "bugs"}
    assert args("notes='x y' focus=perf rust") == {"notes": "x y", "focus": "perf", "language": "rust"}


def test_quotes_keep_spaces_in_one_argument() -> None:
    assert args('"error handling" \'type script\'') == {"focus": "error handling", "language": "type script"}
    assert args('focus="a = b" language=""') == {"focus": "a = b", "language": ""}


def test_a_word_with_an_equals_sign_that_names_no_argument_is_a_value() -> None:
    assert args("x=1") == {"focus": "x=1"}


def test_a_missing_required_argument_names_it_and_the_usage() -> None:
    with pytest.raises(InvalidParams) as err:
        args("language=python")
    assert err.value.message == "/review: missing required argument focus (usage: /review <focus> [language] [notes])"
    assert err.value.data == {"missing": ["focus"], "usage": "/review <focus> [language] [notes]"}


def test_an_unclosed_quote_is_refused_with_the_usage() -> None:
    with pytest.raises(InvalidParams, match=r"/review: No closing quotation .*usage: /review <focus>"):
        args('"bugs')


def test_an_argument_given_twice_is_refused() -> None:
    with pytest.raises(InvalidParams, match="argument focus given twice"):
        args("focus=a focus=b")


def test_words_for_a_prompt_without_arguments_are_refused() -> None:
    simple = PromptSpec(name="simple")
    assert args("", simple) == {}
    with pytest.raises(InvalidParams, match="takes no arguments 'extra words'; put more text on the next line"):
        args("extra words", simple)


def test_hints() -> None:
    assert hint_of(REVIEW) == "<focus> [language] [notes]"
    assert hint_of(PromptSpec(name="x")) is None


# -- names and clashes ---------------------------------------------------------------------------


def _provider(name: str, *names: str, source: bool = True) -> Provider:
    specs = tuple(PromptSpec(name=n) for n in names)
    return Provider(name=name, specs=specs, source=name if source else None, templates=None if source else name)


def test_the_first_provider_keeps_a_name_later_ones_are_prefixed() -> None:
    named = assign_names(
        [_provider("demo", "review", "plan", source=False), _provider("ev", "review", "echo"), _provider("team", "review", "echo")]
    )
    assert list(named) == ["review", "plan", "ev:review", "echo", "team:review", "team:echo"]
    assert named["review"].provider.templates == "demo"
    assert named["ev:review"].spec.name == "review"  # the source still gets its own name
    assert named["team:echo"].provider.name == "team"


def test_names_that_cannot_follow_a_slash_are_left_out() -> None:
    assert list(assign_names([_provider("s", "has space", "a/b", "ok-name", "v1.2")])) == ["ok-name", "v1.2"]


def test_names_depend_only_on_the_order_and_on_which_sources_are_up() -> None:
    both = [_provider("a", "x"), _provider("b", "x")]
    assert list(assign_names(both)) == ["x", "b:x"]
    assert list(assign_names(list(reversed(both)))) == ["x", "a:x"]
    assert list(assign_names([_provider("a"), _provider("b", "x")])) == ["x"]  # a is down: b's x is bare


# -- templates and splicing -----------------------------------------------------------------------


def _template(**raw: Any) -> PromptTemplate:
    return msgspec.convert(raw, PromptTemplate)


def test_render_template_fills_placeholders_and_keeps_literal_braces() -> None:
    t = _template(
        arguments=[{"name": "who", "required": True}, {"name": "tone"}],
        messages=[
            {"text": "Greet {who} {{politely}} {tone}."},
            {"role": "assistant", "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"}},
            {"content": {"type": "resource", "resource": {"uri": "file:///{who}.txt", "text": "about {who}"}}},
        ],
    )
    out = render_template(t, {"who": "Ada"})
    assert out[0] == ("user", TextContent(text="Greet Ada {politely} ."))
    assert out[1] == ("assistant", ImageContent(data="AAAA", mime_type="image/png"))
    role, block = out[2]
    assert isinstance(block, EmbeddedResource) and block.resource.uri == "file:///Ada.txt" and block.resource.text == "about Ada"


def test_splice_labels_assistant_content_and_keeps_the_rest() -> None:
    attachment = TextContent(text="attached")
    messages = [
        ("user", TextContent(text="Review it.")),
        ("assistant", TextContent(text="Sure.")),
        ("assistant", ImageContent(data="AA", mime_type="image/png")),
    ]
    out = splice("review", messages, "and the tests too", [attachment])  # type: ignore[arg-type]
    assert out == [
        TextContent(text="Review it."),
        TextContent(text="[assistant message from /review]\nSure."),
        TextContent(text="[assistant message from /review: the next block]"),
        ImageContent(data="AA", mime_type="image/png"),
        TextContent(text="and the tests too"),
        attachment,
    ]


# -- the registry ---------------------------------------------------------------------------------

CONFIG: dict[str, Any] = {
    "routes": {
        "demo": {
            "back": {"kind": "demo", "chunk_delay_s": 0},
            "prompts": {
                "review": {"description": "the route's own review", "messages": [{"text": "route review {focus}"}],
                           "arguments": [{"name": "focus", "required": True}]},
            },
        },
        "plain": {"back": {"kind": "demo", "chunk_delay_s": 0}, "shared_prompts": False},
        "other": {"back": {"kind": "demo", "chunk_delay_s": 0}},
    },
    "prompts": {
        "review": {"description": "shared review", "messages": [{"text": "shared review {focus}"}],
                   "arguments": [{"name": "focus", "required": True, "values": ["bugs", "style"]}]},
        "think": {"description": "hides the demo's own think", "messages": [{"text": "Think hard about {topic}"}],
                  "arguments": [{"name": "topic"}]},
    },
    "store": {"flush_interval_s": 0.01},
}


def test_route_commands_templates_override_and_opt_out() -> None:
    registry = PromptRegistry(parse_config(CONFIG))
    demo = {c.name: c for c in registry.commands("demo")}
    assert demo["review"].description == "the route's own review" and demo["review"].hint == "<focus>"
    assert demo["think"].hint == "[topic]"
    assert [c.name for c in registry.commands("other")] == ["review", "think"]
    assert registry.commands("other")[0].description == "shared review"
    assert registry.commands("plain") == [] and not registry.has_prompts("plain")


def test_the_mcp_front_list_names_every_template_once() -> None:
    registry = PromptRegistry(parse_config(CONFIG))
    assert list(registry.prompts()) == ["review", "think", "demo:review"]


def test_merged_commands_a_prompt_hides_the_back_command_of_its_name() -> None:
    registry = PromptRegistry(parse_config(CONFIG))
    back = [ev.CommandInfo(name="think", description="demo think"), ev.CommandInfo(name="plan", description="demo plan")]
    merged = registry.merged("demo", back)
    assert [c.name for c in merged] == ["plan", "review", "think"]
    assert merged[2].description == "hides the demo's own think"


def test_resolve_leaves_plain_text_back_commands_and_routes_without_prompts_alone() -> None:
    registry = PromptRegistry(parse_config(CONFIG))
    assert registry.resolve("demo", [TextContent(text="hello")], []) is None
    assert registry.resolve("demo", [TextContent(text="/plan x")], ["plan"]) is None
    assert registry.resolve("plain", [TextContent(text="/anything")], []) is None
    inv = registry.resolve("demo", [TextContent(text="/review bugs\nmore"), TextContent(text="att")], [])
    assert inv is not None and inv.arguments == {"focus": "bugs"} and inv.after == "more" and inv.others == [TextContent(text="att")]


def test_resolve_refuses_an_unknown_command_naming_the_known_ones() -> None:
    registry = PromptRegistry(parse_config(CONFIG))
    with pytest.raises(InvalidParams) as err:
        registry.resolve("demo", [TextContent(text="/nope")], ["plan"])
    assert err.value.message == (
        "unknown command /nope; commands are: /plan, /review, /think (prompts: /review <focus>; /think [topic])"
    )


async def test_expand_fills_the_route_template() -> None:
    with trio.fail_after(CEILING_S):
        registry = PromptRegistry(parse_config(CONFIG))
        inv = registry.resolve("demo", [TextContent(text="/review 'error paths'\nthanks")], [])
        assert inv is not None
        assert await registry.expand(inv) == [TextContent(text="route review error paths"), TextContent(text="thanks")]


# -- sessions ------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def deliver(self, event: ev.Event) -> None:
        self.events.append(event)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


async def test_a_session_expands_before_the_back_and_refuses_before_any_turn() -> None:
    with trio.fail_after(CEILING_S):
        manager = SessionManager(parse_config(CONFIG), MemoryStore(), make_back)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo")
            names = [c.name for c in session.commands()]
            assert names[-2:] == ["review", "think"] and "plan" in names and names.count("think") == 1
            rec = Recorder()
            session.subscribe(rec)
            with pytest.raises(InvalidParams, match="missing required argument focus"):
                session.start_turn([TextContent(text="/review")])
            with pytest.raises(InvalidParams, match="unknown command /nope"):
                session.start_turn([TextContent(text="/nope")])
            assert rec.events == [] and session.turn is None  # no turn started
            turn = session.start_turn([TextContent(text="/think 'the cache'")])
            ended = await turn.wait()
            assert ended.stop_reason is ev.StopReason.END_TURN
            started = next(e for e in rec.events if isinstance(e, ev.TurnStarted))
            assert started.prompt == [TextContent(text="/think 'the cache'")]  # the log keeps what the user typed
            reply = "".join(e.content.text for e in rec.events if isinstance(e, ev.MessageChunk) and not e.thought)  # type: ignore[union-attr]
            assert reply == "You said: Think hard about the cache"  # the back got the template's text
            turn = session.start_turn([TextContent(text="/plan ship it")])  # the demo's own command passes
            assert (await turn.wait()).stop_reason is ev.StopReason.END_TURN
            await session.close()
            nursery.cancel_scope.cancel()


# -- configuration ------------------------------------------------------------------------------------


def test_config_finds_what_the_types_cannot() -> None:
    raw = {
        "routes": {
            "a": {
                "back": {"kind": "demo"},
                "prompt_sources": [{"name": "ev", "url": "http://127.0.0.1:1/mcp"}],
                "prompts": {"bad name": {"messages": [{"text": "x"}]}},
            }
        },
        "prompts": {
            "p": {"arguments": [{"name": "x"}, {"name": "x"}], "messages": [{"text": "{x} {y}"}, {"content": {"type": "nope"}}]},
        },
        "prompt_sources": [{"name": "ev", "command": ["node", "x.js"]}],
    }
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    problems = err.value.problems
    assert "$.prompts.p.arguments[1].name: duplicate argument 'x'" in problems
    assert "$.prompts.p.messages: placeholders ['y'] name no argument; arguments are ['x']" in problems
    assert any(p.startswith("$.prompts.p.messages[1].content: not a content block") for p in problems)
    assert any(p.startswith("$.routes.a.prompts.bad name: prompt names use") for p in problems)
    assert "$.routes.a.prompt_sources[0].name: 'ev' is also the name of $.prompt_sources[0]; source names are unique" in problems


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"name": "x"}, r"set exactly one of command \(stdio\) and url \(Streamable HTTP\)"),
        ({"name": "x", "command": ["a"], "url": "http://h/mcp"}, "set exactly one of command"),
        ({"name": "x", "url": "ftp://h"}, "is not an http:// or https:// URL"),
        ({"name": "x", "command": ["a"], "headers": {"A": {"env": "E", "file": "f"}}}, "set exactly one of env and file"),
    ],
)
def test_bad_sources_are_refused(source: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"routes": {"a": {"back": {"kind": "demo"}}}, "prompt_sources": [source]})


def test_a_source_repr_hides_its_secrets() -> None:
    config = parse_config(
        {"routes": {"a": {"back": {"kind": "demo"}}},
         "prompt_sources": [{"name": "x", "url": "http://h/mcp", "headers": {"Authorization": "Bearer s3cret"}}]}
    )
    assert "s3cret" not in repr(config.prompt_sources[0])


# -- no `mcp` unless a route uses an MCP source ---------------------------------------------------------

_RUN_WITHOUT_SOURCES = """
import json, sys, trio
from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core.content import TextContent
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore
config = parse_config(json.loads(sys.argv[1]))
async def main():
    manager = SessionManager(config, MemoryStore(), make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        session = await manager.create("demo")
        await session.start_turn([TextContent(text=sys.argv[2])]).wait()
        session.commands()
        nursery.cancel_scope.cancel()
trio.run(main)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types", "httpx2", "pydantic"))))
"""


@pytest.mark.parametrize("with_templates", [False, True])
def test_a_route_without_mcp_sources_never_imports_the_sdk(with_templates: bool) -> None:
    config = {"routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0}}}}
    if with_templates:
        config["prompts"] = CONFIG["prompts"]
    text = "/think tests" if with_templates else "hello"
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT_SOURCES, json.dumps(config), text],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(proc.stdout.splitlines()[-1]) == [], proc.stderr


async def test_a_reload_changes_the_commands_and_tells_the_listeners() -> None:
    with trio.fail_after(CEILING_S):
        registry = PromptRegistry(parse_config(CONFIG))
        heard: list[str] = []
        unlisten = registry.listen("other", lambda: heard.append("other"))
        registry.listen(None, lambda: heard.append("mcp"))
        changed = {**CONFIG, "prompts": {"standup": {"description": "Standup", "messages": [{"text": "standup"}]}}}
        registry.reconfigure(parse_config(changed))
        assert heard == ["other", "mcp"]
        assert [c.name for c in registry.commands("other")] == ["standup"]
        unlisten()
        registry.reconfigure(parse_config(CONFIG))
        assert heard == ["other", "mcp", "mcp"]
