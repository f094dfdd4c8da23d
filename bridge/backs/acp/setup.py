"""What the ACP back hands an agent and reads back from it (no trio, no processes).

The agent's environment (`env` values or `{env = NAME}` references, resolved when
it starts and never logged), the MCP servers of `session/new`, its config options
and modes as canonical options, its stop reasons, and the permission options the
route's policy picks from. Agent results are read leniently: a field the shared
Structs require but an agent leaves out must not break a working agent.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from bridge.codecs import safejson
from bridge.backs.acp.config import AcpBackConfig as AcpBack, AcpMcpServer, EnvFrom
from bridge.core import events as ev
from bridge.errors import BackUnavailable
from bridge.schema import acp

__all__ = [
    "CANCELLED",
    "MODE",
    "STOPS",
    "PromptResult",
    "SetupResult",
    "agent_env",
    "mcp_wire",
    "mode_from_wire",
    "options_from_wire",
    "pick",
    "prompt_decoder",
    "resolve",
    "said",
    "selected",
    "setup_decoder",
]

# What an agent inherits from the bridge's environment unless `inherit_env = true`:
# enough to find programs and its own settings, no credentials (DESIGN.md, complaint 4).
_BASE_ENV = ("HOME", "LOGNAME", "USER", "PATH", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")
STOPS = {s.value: s for s in ev.StopReason if s not in (ev.StopReason.FAILED, ev.StopReason.INPUT_REQUIRED)}
MODE = "mode"  # the option id under which the agent's (deprecated) session modes appear


class PromptResult(msgspec.Struct, rename="camel"):
    stop_reason: Any = None


class SetupResult(msgspec.Struct, rename="camel"):
    """session/new and session/load results, read leniently (options are rebuilt by hand)."""

    session_id: Any = None
    modes: dict[str, Any] | None = None
    config_options: list[dict[str, Any]] | None = None


setup_decoder = safejson.Decoder(SetupResult | None)
prompt_decoder = safejson.Decoder(PromptResult | None)


def resolve(value: str | EnvFrom, where: str) -> str:
    if isinstance(value, EnvFrom):
        found = os.environ.get(value.env)
        if found is None:
            # Name the variable, never a value (STYLE.md rule 21).
            raise BackUnavailable(f"{where}: the environment variable {value.env} is not set")
        return found
    return value


def agent_env(name: str, cfg: AcpBack) -> dict[str, str]:
    base = dict(os.environ) if cfg.inherit_env else {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
    base.update({k: resolve(v, f"route {name}: env.{k}") for k, v in cfg.env.items()})
    return base


def mcp_wire(name: str, server: AcpMcpServer) -> dict[str, Any]:
    where = f"route {name}: mcp_servers.{server.name}"
    if server.type == "stdio":
        env = [{"name": k, "value": resolve(v, where)} for k, v in server.env.items()]
        return {"name": server.name, "command": server.command, "args": server.args, "env": env}
    headers = [{"name": k, "value": resolve(v, where)} for k, v in server.headers.items()]
    return {"type": server.type, "name": server.name, "url": server.url, "headers": headers}


def options_from_wire(config: list[dict[str, Any]] | None) -> list[ev.ConfigOption]:
    """The agent's select config options, groups flattened (ACP, Session Config Options)."""
    out: list[ev.ConfigOption] = []
    for o in config or []:
        if not isinstance(o, dict) or o.get("type", "select") != "select" or not isinstance(o.get("id"), str):
            continue  # booleans need a client capability we do not advertise
        values: list[ev.ConfigValue] = []
        for v in o.get("options") or []:
            for item in v.get("options", []) if isinstance(v, dict) and "group" in v else [v]:
                if isinstance(item, dict) and isinstance(item.get("value"), str):
                    values.append(ev.ConfigValue(value=item["value"], name=str(item.get("name", item["value"])),
                                                 description=item.get("description")))  # fmt: skip
        out.append(ev.ConfigOption(id=o["id"], name=str(o.get("name", o["id"])), current=str(o.get("currentValue", "")),
                                   values=values, description=o.get("description"), category=o.get("category")))  # fmt: skip
    return out


def mode_from_wire(modes: dict[str, Any] | None) -> ev.ConfigOption | None:
    """The agent's (deprecated) session modes as one select option of category "mode"."""
    if not isinstance(modes, dict):
        return None
    available = [m for m in modes.get("availableModes") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ev.ConfigOption(
        id=MODE, name="Mode", current=str(modes.get("currentModeId", "")), category="mode",
        values=[ev.ConfigValue(value=m["id"], name=str(m.get("name", m["id"])), description=m.get("description"))
                for m in available],
    )  # fmt: skip


def said(error: Any) -> str:
    """An agent's JSON-RPC error in words: its message, and its data when short."""
    data = "" if error.data is None else " " + msgspec.json.encode(error.data).decode()[:300]
    return f"{error.message}{data}"


def pick(options: list[acp.PermissionOption], kinds: tuple[str, ...]) -> str | None:
    for kind in kinds:
        for o in options:
            if o.kind == kind:
                return o.option_id
    return None


def selected(option_id: str) -> acp.RequestPermissionResult:
    return acp.RequestPermissionResult(outcome=acp.PermissionOutcome(outcome="selected", option_id=option_id))


CANCELLED = acp.RequestPermissionResult(outcome=acp.PermissionOutcome(outcome="cancelled"))
