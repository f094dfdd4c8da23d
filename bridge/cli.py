"""The `agent-bridge` command: a thin click shell over the daemon's entry points.

Exit codes are named (sysexits.h): a configuration error exits 78 (EX_CONFIG) so
systemd does not restart-loop on it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import click

from bridge import __version__
from bridge.errors import ConfigError
from bridge.config_cli import FullHelpGroup, check_config_command, config_commands
from bridge.store_cli import store_commands

__all__ = ["main"]

EX_OK = 0
EX_TURN_FAILED = 1
EX_USAGE = 64
EX_UNAVAILABLE = 69  # `acp --connect`: the daemon is not there, or went away
EX_OSERR = 71  # `serve`: a listener or the store could not be opened
EX_CONFIG = 78
# `serve` stopped by a second SIGTERM/SIGINT exits 128 + the signal's number; `acp`
# stopped by Ctrl-C exits 128 + SIGINT. `ask` names its own codes (bridge/ask.py).
EX_INTERRUPTED = 128 + signal.SIGINT


def _setup_logging(level: str, fmt: str | None = None) -> None:
    from bridge.logs import setup

    setup(level, fmt or "text")


def _setup_tracing(config: Any) -> None:
    """`[telemetry]` (bridge/telemetry): on only when enabled; a missing extra is a config error."""
    from bridge import telemetry

    try:
        telemetry.setup(config.telemetry)
    except ImportError as exc:
        click.echo(f"config error: {exc}", err=True)
        sys.exit(EX_CONFIG)


def _load(config_path: str | None, *, listen: str | None = None) -> Any:
    from bridge.config import load_config
    from bridge.config_check import describe

    path = config_path or os.environ.get("AGENT_BRIDGE_CONFIG") or None
    try:
        return load_config(path, listen=listen)
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(f"config error: {describe(problem, path)}", err=True)
        sys.exit(EX_CONFIG)


def _pick_route(config: Any, route: str | None) -> str:
    name = route or config.default_route or (next(iter(config.routes)) if len(config.routes) == 1 else None)
    if name is None:
        click.echo(f"name a route: {', '.join(sorted(config.routes))}", err=True)
        sys.exit(EX_USAGE)
    if name not in config.routes:
        from bridge.config_check import did_you_mean

        near = did_you_mean(name, config.routes)
        click.echo(f"no route named {name!r}; {near + ' ' if near else ''}routes are: {', '.join(sorted(config.routes))}", err=True)
        sys.exit(EX_USAGE)
    return name


def _state_dir(config: Any, state_dir: str | None) -> str:
    from bridge.daemon import default_state_dir

    return state_dir or config.store.state_dir or default_state_dir()


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="TOML file (default: $AGENT_BRIDGE_CONFIG, else the built-in demo)."
)
state_option = click.option("--state-dir", type=click.Path(file_okay=False), help="Where sessions are stored.")
log_option = click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None, help="Default: the config's log_level."
)
log_format_option = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    envvar="AGENT_BRIDGE_LOG_FORMAT",
    help="Log lines on stderr: text (default) or one JSON object per line.",
)


@click.group(cls=FullHelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agent-bridge")
def main() -> None:
    """Connect agent clients and agent backends across ACP, A2A, MCP and chat streams."""


@main.command()
@click.argument("route", required=False)
@config_option
@state_option
@log_option
@log_format_option
@click.option(
    "--connect",
    "connect",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[PATH]",
    help="Relay to the daemon's ACP socket (default: $AGENT_BRIDGE_SOCKET, else the daemon's default path) instead of running the route here.",
)
def acp(
    route: str | None,
    config_path: str | None,
    state_dir: str | None,
    log_level: str | None,
    log_format: str | None,
    connect: str | None,
) -> None:
    """Speak ACP on stdin/stdout for ROUTE (what an editor spawns)."""
    if connect is not None:
        from bridge.shim import run as relay

        if route is None and connect and os.sep not in connect:
            route, connect = connect, ""  # `acp --connect ROUTE`: the value was the route
        # Nothing else is loaded: the daemon owns the config, the sessions and the secrets.
        sys.exit(relay(route, connect or None))

    import trio

    from bridge.daemon import run_acp_stdio

    config = _load(config_path)
    _setup_logging(log_level or config.log_level, log_format)
    _setup_tracing(config)
    name = _pick_route(config, route)
    # Only protocol may reach stdout: keep our own copy of it, and point fd 1 (and
    # so any stray print) at stderr.
    stdout_fd = os.dup(1)
    stdin_fd = os.dup(0)
    os.dup2(2, 1)
    _tune_gc()
    sys.exit(_run_interruptible(trio.run, run_acp_stdio, config, name, _state_dir(config, state_dir), stdin_fd, stdout_fd))


def _run_interruptible(run: Any, *args: Any) -> Any:
    """`run(*args)`, and Ctrl-C (a KeyboardInterrupt, alone or in a group) exits 130
    with no traceback (and not click's "Aborted!")."""
    try:
        return run(*args)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or (
            isinstance(exc, BaseExceptionGroup) and exc.split(KeyboardInterrupt)[1] is None
        )
        if not interrupted:
            raise
        sys.exit(EX_INTERRUPTED)


def _tune_gc() -> None:
    """Once started: what exists now lives as long as the process, so the cyclic
    collector need not walk it again (`gc.freeze`), and young collections run every
    50,000 allocations instead of 700, which each request or turn would otherwise
    trigger several times over (bench/a2a_front.py: ~9 % less CPU per request)."""
    import gc

    gc.freeze()
    gc.set_threshold(50_000, 10, 10)


@main.command()
@config_option
@state_option
@log_option
@log_format_option
def mcp(config_path: str | None, state_dir: str | None, log_level: str | None, log_format: str | None) -> None:
    """Speak MCP on stdin/stdout: every route's prompts (and their completions), every route as a tool."""
    import trio

    from bridge.daemon import run_mcp_stdio

    config = _load(config_path)
    _setup_logging(log_level or config.log_level, log_format)
    _setup_tracing(config)
    # Only protocol may reach stdout (as for `acp`).
    stdout_fd = os.dup(1)
    stdin_fd = os.dup(0)
    os.dup2(2, 1)
    trio.run(run_mcp_stdio, config, _state_dir(config, state_dir), stdin_fd, stdout_fd)


@main.command()
@config_option
@state_option
@log_option
@log_format_option
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Worker processes sharing the listeners, so one machine uses all its cores (needs a PostgreSQL [store] url).",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default=None,
    help="The HTTP listener, over $AGENT_BRIDGE_LISTEN, $AGENT_BRIDGE__SERVER__LISTEN and [server] listen (port 0: any free port).",
)
def serve(
    config_path: str | None, state_dir: str | None, log_level: str | None, log_format: str | None, workers: int, listen: str | None
) -> None:
    """Run the daemon: every HTTP front on one listener, ACP on a unix socket.

    The listener is --listen, else $AGENT_BRIDGE_LISTEN, else [server] listen; any
    config key can be set from the environment (AGENT_BRIDGE__TABLE__KEY=value, see
    README.md, "Configuration"). Under systemd: Type=notify, watchdog, socket
    activation; SIGHUP reloads the config, SIGTERM stops gracefully (see systemd/).
    """
    import trio

    from bridge.daemon import serve as serve_daemon
    from bridge.logs import set_log_ids
    from bridge.service import StartError
    from bridge.workers import watch_supervisor, worker_index

    path = config_path or os.environ.get("AGENT_BRIDGE_CONFIG") or None
    config = _load(path, listen=listen)
    _setup_logging(log_level or config.log_level, log_format)
    if workers > 1:
        if not config.store.postgres:
            click.echo(
                "config error: --workers needs a PostgreSQL store ([store] url, url_env or url_file): "
                "separate processes on one SQLite file cannot reach each other's sessions",
                err=True,
            )
            sys.exit(EX_CONFIG)
        from bridge.workers import run_workers

        options = {"--config": path, "--state-dir": state_dir, "--log-level": log_level, "--log-format": log_format, "--listen": listen}
        sys.exit(run_workers(config, options, workers))
    _setup_tracing(config)  # in each worker, not in the supervisor of `--workers N`
    index = worker_index()
    if index is not None:
        set_log_ids(worker=str(index))  # trio.run copies this context into every task

    async def main_task() -> int:
        status = 0

        async def run(task_status: Any) -> None:
            nonlocal status
            status = await serve_daemon(config, state_dir=_state_dir(config, state_dir), config_path=path, task_status=task_status)
            nursery.cancel_scope.cancel()  # stopped: the supervisor's watch (a worker's) ends too

        async with trio.open_nursery() as nursery:
            if index is not None:
                nursery.start_soon(watch_supervisor)
            try:
                bound = await nursery.start(run)
            except StartError as exc:  # raised before anything started: no group to unwrap
                logging.getLogger("bridge.daemon").error("%s", exc.message)
                return exc.status
            # One line on stdout, for whoever started us with port 0.
            click.echo(f"listening {' '.join(bound)}")
            from bridge.fronts.console import console_url

            console = console_url(bound)
            if console is not None:
                click.echo(f"console: {console}")
            sys.stdout.flush()
            _tune_gc()
        return status

    sys.exit(trio.run(main_task))


@main.command(short_help="Check the config, every back, prompt source, token, CA file and directory once; say what works.")
@config_option
@state_option
@log_option
@log_format_option
def doctor(config_path: str | None, state_dir: str | None, log_level: str | None, log_format: str | None) -> None:
    """Validate the config, try each route's back, each MCP prompt source and a PostgreSQL
    store once, and check what the config names on this machine: tokens (token_env set,
    token_file readable), CA files, the ACP socket's directory and the state directory.
    One line per check, with a hint for each failure.

    Exits 0 when everything checked works, 1 when something does not, 78 on a config error.
    """
    import trio

    from bridge.doctor import check, render_table
    from bridge.doctor_setup import setup_checks
    from bridge.reload import import_credentials

    path = config_path or os.environ.get("AGENT_BRIDGE_CONFIG") or None
    config = _load(path)
    _setup_logging(log_level or "error", log_format)
    n_routes = len(config.routes)
    n_sources = len(config.prompt_sources) + sum(len(r.prompt_sources) for r in config.routes.values())
    click.echo(
        f"config {path or '(built-in demo)'}: ok, {n_routes} route{'' if n_routes == 1 else 's'}, "
        f"{n_sources} prompt source{'' if n_sources == 1 else 's'}"
    )
    import_credentials(config)
    routes, sources, store = trio.run(check, config)
    setup = setup_checks(config, _state_dir(config, state_dir))
    click.echo(render_table(routes, sources, store, setup))
    sys.exit(EX_TURN_FAILED if any(p.ok is False for p in routes + sources + store + setup) else EX_OK)


@main.command()
@click.argument("route")
@click.argument("prompt")
@config_option
@state_option
@log_option
@log_format_option
@click.option(
    "--answer",
    type=click.Choice(["allow", "reject", "deny", "first"]),
    default=None,
    help="Answer questions with options this way (allow/reject by option kind, else the first option; deny = reject).",
)
@click.option(
    "--answer-option",
    "answer_options",
    multiple=True,
    metavar="ID_OR_LABEL",
    help="Pick this option (its id, label or number); repeat it for a multi-select.",
)
@click.option("--answer-text", default=None, metavar="TEXT", help="Free text for a question that takes it; a form's values (JSON object, or a one-field form's value).")
@click.option("--json", "as_json", is_flag=True, help="Print the canonical events as JSON lines instead of text.")
@click.option("--session", "session_id", default=None, help="Continue this stored session.")
def ask(
    route: str,
    prompt: str,
    config_path: str | None,
    state_dir: str | None,
    log_level: str | None,
    log_format: str | None,
    answer: str | None,
    answer_options: tuple[str, ...],
    answer_text: str | None,
    as_json: bool,
    session_id: str | None,
) -> None:
    """Run one turn of ROUTE with PROMPT and render it as it streams.

    Questions are answered by the --answer* flags, else asked on the terminal. Exits 0
    when the turn ended, 1 when it failed, 2 on a usage error, 3 when a question was
    left unanswered, 130 on Ctrl-C.
    """
    from bridge.ask import AskRequest, run_ask
    from bridge.ask_answers import AnswerFlags

    config = _load(config_path)
    _setup_logging(log_level or "warning", log_format)
    _setup_tracing(config)
    policy = "reject" if answer == "deny" else answer
    flags = AnswerFlags(policy=policy, options=answer_options, text=answer_text)  # type: ignore[arg-type]
    request = AskRequest(route=route, prompt=prompt, flags=flags, json=as_json, session_id=session_id)
    sys.exit(_run_interruptible(run_ask, config, _state_dir(config, state_dir), request))


main.add_command(store_commands([config_option, state_option], _load, _state_dir))
main.add_command(check_config_command(config_option))
main.add_command(config_commands(config_option))
