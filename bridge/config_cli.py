"""`agent-bridge check-config` and `agent-bridge config schema`: the config file for its author.

`check-config [FILE] [--config FILE] [--format text|json]` reports every problem of
the file in one run (bridge/config_check.py walks what msgspec refused), each with its
`$.path`, its line and a hint, and exits 78 (EX_CONFIG) if there is any. The overrides
of the environment (bridge/config_env.py) are applied as the daemon would, and a
problem they bring names the variable. `--format json` prints one document for editors
and CI:

    {"file": "agent-bridge.toml", "ok": false,
     "problems": [{"path": "$.routes.r.question_timout_s", "line": 6,
                   "message": "unknown key", "hint": "did you mean 'question_timeout_s'?"}]}

(`path` and `line` are null for a problem of the file as a whole, such as a TOML syntax
error, whose `line` is then the one the TOML parser names.)

`config schema` prints the JSON Schema of the file (bridge/config_schema.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from bridge.errors import ConfigError, ConfigProblem

__all__ = ["EX_CONFIG", "EX_USAGE", "FullHelpGroup", "check_config_command", "config_commands"]

EX_USAGE = 64
EX_CONFIG = 78


class FullHelpGroup(click.Group):
    """A group whose --help lists each command with its whole first sentence (wrapped),
    never cut to "..." as click does past the terminal's width."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _as_json(problem: str, file: str | None) -> dict[str, Any]:
    found = ConfigProblem.of(problem)
    message = found.message
    if not found.path and file is not None:
        message = message.removeprefix(f"{file}: ")  # the document names the file once
    return {"path": found.path or None, "line": found.line, "message": message, "hint": found.hint}


def check_config_command(config_option: Callable[[Any], Any]) -> click.Command:
    """`check-config`, taking `--config` as every other command does (and FILE, as before)."""

    @click.command("check-config", short_help="Validate a config file and report every problem at once (exit 78 if any).")
    @click.argument("file", type=click.Path(dir_okay=False), required=False)
    @config_option
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="json: one document listing every problem (for editors and CI).")
    def check_config(file: str | None, config_path: str | None, fmt: str) -> None:
        """Validate FILE (or --config, else $AGENT_BRIDGE_CONFIG, else the built-in demo).

        Every problem is reported in one run with its $.path, its line in the file and a
        hint (the key you may have meant, the allowed values); exits 78 if there is any.
        Settings from the environment (AGENT_BRIDGE__TABLE__KEY, AGENT_BRIDGE_LISTEN)
        are applied as the daemon would apply them.
        """
        from bridge.config import load_config

        if file is not None and config_path is not None and file != config_path:
            click.echo("name the file once: FILE or --config", err=True)
            sys.exit(EX_USAGE)
        path = file or config_path or os.environ.get("AGENT_BRIDGE_CONFIG") or None
        try:
            config = load_config(path)
        except ConfigError as exc:
            # In the file's order (those without a line, from the environment, last).
            problems = sorted(exc.problems, key=lambda p: (ConfigProblem.of(p).line or sys.maxsize))
            if fmt == "json":
                click.echo(json.dumps({"file": path, "ok": False, "problems": [_as_json(p, path) for p in problems]}, indent=2))
            else:
                from bridge.config_check import describe

                for problem in problems:
                    click.echo(describe(problem, path), err=True)
                n = len(problems)
                click.echo(f"{path or '(built-in demo)'}: {n} problem{'' if n == 1 else 's'}", err=True)
            sys.exit(EX_CONFIG)
        if fmt == "json":
            click.echo(json.dumps({"file": path, "ok": True, "problems": []}, indent=2))
        else:
            n = len(config.routes)
            click.echo(f"{path or '(built-in demo)'}: ok, {n} route{'' if n == 1 else 's'}: {', '.join(sorted(config.routes))}")

    return check_config


def config_commands(config_option: Callable[[Any], Any]) -> click.Group:
    """The `config` group: `config schema`."""

    @click.group("config", cls=FullHelpGroup, short_help="The config file's JSON Schema, for editors (config schema).")
    def config() -> None:
        """About the config file itself."""

    @config.command("schema", short_help="Print the JSON Schema of the config file (for Taplo / Even Better TOML).")
    @config_option
    def schema(config_path: str | None) -> None:
        """Print the JSON Schema of the config file, for editors (Taplo, Even Better TOML).

        With --config, the back and front kinds of that file's plugins are included too;
        without, the built-in ones (the schema shipped as bridge/config.schema.json).
        """
        from bridge import registry
        from bridge.config_schema import config_schema

        protocols = None
        if config_path is not None:
            import tomllib

            try:
                with open(config_path, "rb") as f:
                    plugins = tomllib.load(f).get("plugins", [])
                protocols = registry.load([p for p in plugins if isinstance(p, str)] if isinstance(plugins, list) else [])
            except (OSError, tomllib.TOMLDecodeError, RecursionError, ConfigError) as exc:
                click.echo(f"config error: {config_path}: {getattr(exc, 'message', exc)}", err=True)
                sys.exit(EX_CONFIG)
        click.echo(json.dumps(config_schema(protocols), indent=2))

    return config
