"""Durable state: sessions, turns and their event logs, behind one interface.

`Store` is the interface; `MemoryStore` serves unit tests, `SqliteStore` the
daemon by default (stdlib sqlite3 in WAL mode, in a thread of its own), `PgStore` a
daemon whose `[store] url` names a PostgreSQL database (psycopg in worker threads),
which several daemons share (issue 17).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bridge.errors import ConfigError
from bridge.store.base import SessionRecord, Store, StoreStats, StoredBatch, TaskPage, TaskRecord, TurnRecord

if TYPE_CHECKING:
    from bridge.config import StoreConfig

__all__ = [
    "SessionRecord", "Store", "StoreStats", "StoredBatch", "TaskPage", "TaskRecord", "TurnRecord", "open_store",
    "store_url",
]  # fmt: skip

_SCHEMES = ("postgresql://", "postgres://")


def store_url(config: StoreConfig) -> str | None:
    """The PostgreSQL URL `[store]` gives (`url`, the variable `url_env` names, or the
    file `url_file` names, read now and stripped), None for SQLite. A ConfigError for
    more than one of them, a variable unset or empty, a file unreadable or empty, or a
    value that is no PostgreSQL URL; no error shows the value (it holds the password)."""
    from bridge.config import read_secret

    given = [name for name in ("url", "url_env", "url_file") if getattr(config, name)]
    if not given:
        return None
    if len(given) > 1:
        raise ConfigError([f"$.store: give one of url, url_env and url_file, not {' and '.join(given)}"])
    if config.url_env:
        url = os.environ.get(config.url_env)
        if not url:
            raise ConfigError([f"$.store.url_env: the environment variable {config.url_env} is not set or is empty"])
    elif config.url_file:
        url = read_secret(None, config.url_file)
        if not url:
            raise ConfigError([f"$.store.url_file: {config.url_file} cannot be read or is empty"])
    else:
        url = config.url
    assert url is not None
    if not url.startswith(_SCHEMES):
        raise ConfigError([f"$.store.{given[0]}: not a PostgreSQL URL (postgresql://user@host/database)"])
    return url


def open_store(
    config: StoreConfig | str | None, state_dir: str | None = None, *, lease_ttl_s: float = 10.0
) -> Store:
    """The store `[store]` selects: PostgreSQL when it gives a URL (`store_url`), else
    SQLite in `state_dir` (created if missing), else (no directory) in memory. A first
    argument that is a directory or None is the SQLite or memory store alone."""
    if config is None or isinstance(config, str):
        config, state_dir = None, config
    url = None if config is None else store_url(config)
    if url is not None:
        from bridge.store.pg import PgStore

        return PgStore(url, lease_ttl_s=lease_ttl_s)
    if state_dir is None:
        from bridge.store.memory import MemoryStore

        return MemoryStore()
    from bridge.store.sqlite import SqliteStore

    return SqliteStore(state_dir)
