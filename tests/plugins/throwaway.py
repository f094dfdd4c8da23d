"""A throwaway protocol, to show that a new back and a new front need no file under `bridge/`.

Named in a config's `plugins = ["throwaway"]` with this directory on PYTHONPATH
(tests/test_e2e_plugin.py), it declares, the way bridge/registry.py asks:

- an `echo` back (`[routes.NAME.back] kind = "echo"`): answers a prompt with its
  own text, `chunk_chars` characters per message chunk, after `prefix`;
- a `throwaway` front: `POST /throwaway/{route}` with `{"prompt": ...}` runs one turn
  on a new session of that route and answers `{"text": ..., "stop_reason": ...}`; its
  `[throwaway]` section sets `greeting`, put before every answer.

Everything it uses of the bridge is public: the registry's declarations, the config
base Struct, the `Back` protocol's shape, the session manager, the HTTP app.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import trio

from bridge.config import ConfigStruct
from bridge.registry import BackKind, FrontKind, SecretRefs

__all__ = ["BACKS", "FRONTS", "EchoBackConfig", "ThrowawayFrontConfig"]


# -- the back ------------------------------------------------------------------------------


class EchoBackConfig(ConfigStruct, tag="echo", tag_field="kind"):
    prefix: str = "echo: "
    chunk_chars: int = msgspec.field(default=3)
    token_env: str | None = None  # read by nobody; shows the secrets hook


class _EchoSession:
    def __init__(self, cfg: EchoBackConfig) -> None:
        self.cfg = cfg

    async def prompt(self, turn: Any) -> Any:
        from bridge.core.content import TextContent
        from bridge.core.events import MessageChunk, StopReason

        text = self.cfg.prefix + "".join(getattr(block, "text", "") for block in turn.prompt)
        step = max(1, self.cfg.chunk_chars)
        for i in range(0, len(text), step):
            turn.emit(MessageChunk(content=TextContent(text=text[i : i + step]), message_id="echo"))
            await turn.flow()
            if turn.cancel_requested:
                return StopReason.CANCELLED
        return StopReason.END_TURN

    async def cancel(self) -> None:
        pass

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


class EchoBack:
    def __init__(self, name: str, route: Any) -> None:
        from bridge.backs.base import AgentInfo

        self.cfg: EchoBackConfig = route.back
        self.info = AgentInfo(name="echo", title=route.title or "echo", description="says back what it hears")

    async def open_session(self, ctx: Any, *, nursery: trio.Nursery) -> _EchoSession:
        return _EchoSession(self.cfg)

    async def ready(self) -> None:
        pass

    async def probe(self, *, deep: bool) -> str:
        return f"echo back ({'deep' if deep else 'shallow'} check), prefix {self.cfg.prefix!r}"

    async def aclose(self) -> None:
        pass


def _echo_secrets(cfg: EchoBackConfig) -> SecretRefs:
    return SecretRefs(envs=(cfg.token_env,) if cfg.token_env else ())


# -- the front -----------------------------------------------------------------------------


class ThrowawayFrontConfig(ConfigStruct):
    greeting: str = ""


class _Ask(msgspec.Struct):
    prompt: str


class _Collector:
    """A session subscriber gathering the reply's text."""

    protocol = "throwaway"

    def __init__(self) -> None:
        self.text: list[str] = []

    def deliver(self, event: Any) -> None:
        from bridge.core.content import TextContent
        from bridge.core.events import MessageChunk

        if type(event) is MessageChunk and not event.thought and type(event.content) is TextContent:
            self.text.append(event.content.text)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


def _register(app: Any, config: Any, manager: Any) -> None:
    from bridge.core.content import TextContent
    from bridge.errors import BridgeError
    from bridge.fronts.http import read_body, send_json

    greeting = config.section(ThrowawayFrontConfig).greeting

    async def one_turn(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        prompt = msgspec.json.decode(await read_body(receive, 64 * 1024), type=_Ask).prompt
        try:
            session = await manager.create(params["route"], cwd=os.getcwd(), meta={"front": "throwaway"})
        except BridgeError as exc:
            await send_json(send, 404, {"error": exc.message})
            return
        collector = _Collector()
        unsubscribe = session.subscribe(collector)
        try:
            ended = await session.start_turn([TextContent(text=prompt)]).wait()
        finally:
            unsubscribe()
            with trio.move_on_after(5, shield=True):
                await session.close()
        await send_json(send, 200, {"text": greeting + "".join(collector.text), "stop_reason": ended.stop_reason.value})

    app.add("POST", "/throwaway/{route}", one_turn)


BACKS = [BackKind(kind="echo", config=EchoBackConfig, factory=EchoBack, secrets=_echo_secrets)]
FRONTS = [FrontKind(name="throwaway", config=ThrowawayFrontConfig, register=_register)]
