"""The JSON Schema of the config file, from the config Structs (`msgspec.json.schema`).

For editors (Taplo, Even Better TOML): completion, hover docs and checks of
`agent-bridge.toml` as it is typed. `agent-bridge config schema` prints it; the schema
of the built-in backs and fronts is also shipped in the package as
`bridge/config.schema.json` (a test keeps it equal to what this module generates).

The file is not the `Config` Struct itself: a route's `back` is the union of the back
kinds' Structs (tagged by `kind`), and each front's `[NAME]` and `[routes.R.NAME]`
tables are Structs its package declares (bridge/registry.py). So the shape of the file
is built here as Structs of its own (`msgspec.defstruct`) from those parts, with the
same field types and defaults, and handed to msgspec. What a schema cannot say (a check
across fields in a `__post_init__`) is left to `check-config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from bridge import registry
from bridge.config import _DERIVED_CONFIG_KEY, _DERIVED_ROUTE_KEY, _SECTIONS, Config, Route

__all__ = ["SHIPPED_SCHEMA", "config_schema"]

SHIPPED_SCHEMA = Path(__file__).resolve().parent / "config.schema.json"


def _fields(cls: type[msgspec.Struct], drop: set[str]) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(cls):
        if f.name in drop:
            continue
        if f.required:
            out.append((f.encode_name, f.type))  # type: ignore[arg-type]
        elif f.default_factory is not msgspec.NODEFAULT:
            out.append((f.encode_name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            out.append((f.encode_name, f.type, f.default))
    return out


def _file_struct(name: str, doc: str | None, fields: list[Any]) -> Any:
    struct = msgspec.defstruct(name, fields, kw_only=True, frozen=True, forbid_unknown_fields=True)
    struct.__doc__ = doc
    return struct


def config_schema(protocols: registry.Protocols | None = None) -> dict[str, Any]:
    """The schema of a config file whose backs and fronts are `protocols` (default: the built-ins)."""
    protocols = protocols or registry.load([])
    fronts = sorted(protocols.fronts.values(), key=lambda f: f.key)
    route_fields = [("back", protocols.back_union)]
    route_fields += _fields(Route, {"back", _DERIVED_ROUTE_KEY})
    route_fields += [(f.key, f.route_config, msgspec.field(default_factory=f.route_config)) for f in fronts if f.route_config is not None]
    route = _file_struct("Route", "A route: a named back plus its policy ([routes.NAME]).", route_fields)
    top = [("routes", dict[str, route])]  # type: ignore[valid-type]
    top += _fields(Config, {"routes", _DERIVED_CONFIG_KEY, *_SECTIONS})
    sections = {**_SECTIONS, **{f.key: f.config for f in fronts if f.config is not None}}
    top += [(key, typ, msgspec.field(default_factory=typ)) for key, typ in sorted(sections.items())]
    schema = msgspec.json.schema(_file_struct("AgentBridgeConfig", "An agent-bridge configuration file (TOML).", top))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
