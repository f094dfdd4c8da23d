"""`agent-bridge store`: an operator's commands on the session store.

`stats` (counts and sizes, `--format json`), `vacuum` (give free space back to the file
system), `export SESSION` (JSON Lines on stdout, bridge/store/export.py) and
`prune --older-than DURATION` (bridge/store/retention.py). Each opens the state
directory's store (or the PostgreSQL database of `[store] url`) as another process
beside a running daemon would: SQLite's locks keep them apart, and a command that
cannot get the write lock within the store's busy timeout (or a database that cannot
be reached) says so and exits 75 (EX_TEMPFAIL: try again). A command never closes a cut
turn (only the daemon does, at start) nor deletes a session with an open turn.

The click group is built by `store_commands` with the shared options and config
loading of bridge/cli.py, which registers it.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import click

from bridge.config_cli import FullHelpGroup

__all__ = ["EX_FAILED", "EX_TEMPFAIL", "parse_duration", "store_commands"]

EX_FAILED = 1  # no store in the state directory, no such session, a store error
EX_USAGE = 64
EX_TEMPFAIL = 75  # sysexits.h: the store is busy (another process holds its write lock)
EX_CONFIG = 78  # sysexits.h: the configuration's [store] is wrong, or the store is newer than us

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")


def parse_duration(text: str) -> float:
    """Seconds in `30d`, `12h`, `90m`, `45s`, `2w`; ValueError otherwise."""
    m = _DURATION.fullmatch(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m, 45s or 2w")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _target(config: Any, state_dir: str) -> tuple[str, str | None]:
    """Where the commands work and how that is shown: the state directory, or with
    `[store] url` the PostgreSQL database (its URL shown without the password)."""
    from bridge.errors import ConfigError
    from bridge.store import store_url
    from bridge.store.pg_conn import redact

    try:
        url = store_url(config.store)
    except ConfigError as exc:
        _fail(exc.message, EX_CONFIG)
    return (state_dir, None) if url is None else (redact(url), url)


def _with_store(state_dir: str, url: str | None, work: Callable[[Any], Awaitable[int]]) -> None:
    """Run `work(store)` on the state directory's store (or the PostgreSQL store at
    `url`); exit with its status. A store that is not there is not made (a mistyped
    directory must not look empty)."""
    import trio

    from bridge.errors import BridgeError, ConfigError, Overloaded
    from bridge.store.sqlite import DB_FILENAME, SqliteStore

    if url is None and not os.path.isfile(os.path.join(state_dir, DB_FILENAME)):
        _fail(f"no store in {state_dir} (no {DB_FILENAME}); give --state-dir or the config's [store] state_dir", EX_FAILED)

    async def run() -> int:
        if url is None:
            store: Any = SqliteStore(state_dir)
        else:
            from bridge.store.pg import PgStore

            store = PgStore(url, pool_size=1)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        sys.exit(trio.run(run))
    except BrokenPipeError:  # `store export ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(EX_FAILED)
    except Overloaded as exc:
        _fail(exc.message, EX_TEMPFAIL)
    except ConfigError as exc:  # a store written by a newer release
        _fail(exc.message, EX_CONFIG)
    except BridgeError as exc:
        _fail(exc.message, EX_FAILED)


def store_commands(
    options: list[Callable[[Any], Any]], load: Callable[[str | None], Any], state_dir_of: Callable[[Any, str | None], str]
) -> click.Group:
    """The `store` group; `options` add `--config` and `--state-dir` to each command,
    `load(config_path)` reads the config (exiting 78 on an error), `state_dir_of(config,
    state_dir)` picks the directory as every command does."""

    def common(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    @click.group("store", cls=FullHelpGroup)
    def store() -> None:
        """Look after the session store: counts and sizes, VACUUM, export a session, prune old ones."""

    @store.command()
    @common
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="json: one object.")
    def stats(config_path: str | None, state_dir: str | None, fmt: str) -> None:
        """Sessions, turns, events and tasks stored; the file's size and schema version."""
        import msgspec

        config = load(config_path)
        where, url = _target(config, state_dir_of(config, state_dir))

        async def work(s: Any) -> int:
            st = await s.stats()
            if fmt == "json":
                click.echo(msgspec.json.encode({"url" if url else "state_dir": where, **msgspec.to_builtins(st)}).decode())
                return 0
            click.echo(f"store     {where} (schema {st.schema_version})")
            click.echo(f"sessions  {st.sessions}")
            click.echo(f"turns     {st.turns} ({st.open_turns} open)")
            click.echo(f"events    {st.events} (in {st.batches} batches)")
            click.echo(f"tasks     {st.tasks}")
            if url:
                click.echo(f"size      {_size(st.file_bytes)} (the database)")
            else:
                click.echo(f"size      {_size(st.file_bytes)} + {_size(st.wal_bytes)} write-ahead log; {_size(st.free_bytes)} free inside")
            return 0

        _with_store(where, url, work)

    @store.command()
    @common
    def vacuum(config_path: str | None, state_dir: str | None) -> None:
        """Rewrite the store without its free pages (SQLite VACUUM) and truncate its
        write-ahead log. It holds the write lock for the whole rewrite: beside a busy
        daemon, run it when the daemon is stopped or quiet. On PostgreSQL: VACUUM,
        which frees dead rows' space for new ones and locks nobody out."""
        config = load(config_path)
        where, url = _target(config, state_dir_of(config, state_dir))

        async def work(s: Any) -> int:
            before = await s.stats()
            truncated = await s.vacuum()
            after = await s.stats()
            click.echo(f"vacuum: {_size(before.file_bytes + before.wal_bytes)} -> {_size(after.file_bytes + after.wal_bytes)}")
            if not truncated:
                click.echo("the write-ahead log is in use by another process: it shrinks at its next checkpoint")
            return 0

        _with_store(where, url, work)

    @store.command()
    @common
    @click.argument("session_id", metavar="SESSION")
    def export(config_path: str | None, state_dir: str | None, session_id: str) -> None:
        """SESSION as JSON Lines on stdout: its record, turns, events and tasks, secrets redacted."""
        from bridge.store.export import export_session

        config = load(config_path)
        where, url = _target(config, state_dir_of(config, state_dir))
        out = sys.stdout.buffer

        def write(data: bytes) -> None:
            out.write(data)
            out.flush()

        async def work(s: Any) -> int:
            if not await export_session(s, session_id, write):
                click.echo(f"error: no session {session_id!r} in {where}", err=True)
                return EX_FAILED
            return 0

        _with_store(where, url, work)

    @store.command()
    @common
    @click.option("--older-than", "older_than", metavar="DURATION", help="e.g. 30d, 12h (default: [store] retention_days).")
    @click.option("--dry-run", is_flag=True, help="Print what would be deleted; delete nothing.")
    def prune(config_path: str | None, state_dir: str | None, older_than: str | None, dry_run: bool) -> None:
        """Delete the sessions not updated for DURATION, with their turns, events and
        tasks; never one with a turn open. With a daemon running, a session it holds
        open but that nothing updated for that long goes too."""
        import time

        from bridge.store.retention import prune_older

        config = load(config_path)
        where, url = _target(config, state_dir_of(config, state_dir))
        if older_than is None:
            days = config.store.retention_days
            if days is None:
                _fail("give --older-than DURATION (or set [store] retention_days)", EX_USAGE)
            age = days * 86400
        else:
            try:
                age = parse_duration(older_than)
            except ValueError as exc:
                _fail(f"--older-than: {exc}", EX_USAGE)
        before = time.time() - age
        verb = "would prune" if dry_run else "pruned"

        def show(chunk: list[tuple[float, str]]) -> None:
            for ts, sid in chunk:
                click.echo(f"{verb} {sid} (last updated {_when(ts)})")

        async def work(s: Any) -> int:
            n = await prune_older(s, before, dry_run=dry_run, on_chunk=show)
            click.echo(f"{n} sessions {verb}: not updated since {_when(before)}")
            return 0

        _with_store(where, url, work)

    return store
