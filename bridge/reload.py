"""Configuration at start and on SIGHUP: secrets from systemd credentials, and live reload.

Reload (SIGHUP) reads and validates the whole file first; on any problem the running
configuration stays and every problem is logged. Otherwise:
- new routes take sessions at once; changed routes apply to sessions created from now
  on (live sessions keep the route they started with);
- removed routes take no new session or turn; their running turns get
  `[daemon] reload_grace_s` to finish, are then cancelled, and their sessions closed;
- changed access rules apply to every request from now on, and end the streams opened
  under the old ones that the new ones refuse (bridge/session/grants.py);
- `routes`, `default_route`, `log_level` and the sections of reloadable fronts (`[acp]`
  and `[a2a]`, for new connections) apply; `[server]`, `[store]`, `[daemon]`, `[auth]` and the
  sections of fronts declared `reloadable=False` (`[ws]`, `[mcp]`; bridge/registry.py)
  need a restart: a change there is logged and the running values are kept.

Secrets: under systemd, `LoadCredential=NAME:/path` puts a file NAME in
`$CREDENTIALS_DIRECTORY` (and `LoadCredential=agent-bridge:/dir`, as the shipped unit
does, one file `agent-bridge_FILE` per file of /dir). With `[daemon]
env_from_credentials` (default) every credential whose NAME (less an `agent-bridge_`
prefix) looks like an environment variable is exported to our own environment when
that variable is not already set, so `token_env = "NAME"` and `{env = "NAME"}` read
it; a relative A2A `token_file` is read from that directory by the A2A back. Every
secret value we can find is registered for log redaction.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import trio

from bridge.backs.base import Back
from bridge.config import Config, load_config, secret_refs
from bridge.errors import ConfigError
from bridge.logs import add_secret
from bridge.session import SessionManager

__all__ = ["apply_reload", "import_credentials", "register_secrets", "restart_only_changes"]

log = logging.getLogger("bridge.reload")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PREFIX = "agent-bridge_"  # LoadCredential=agent-bridge:/etc/agent-bridge/credentials
_RESTART_ONLY = ("server", "store", "daemon", "auth")  # [auth]: the listener's Authenticator is made at start


def import_credentials(config: Config) -> list[str]:
    """Export systemd credentials named like environment variables; returns their names."""
    where = os.environ.get("CREDENTIALS_DIRECTORY")
    if not where or not config.daemon.env_from_credentials:
        return []
    names = []
    try:
        entries = sorted(os.listdir(where))
    except OSError as exc:
        log.warning("cannot read $CREDENTIALS_DIRECTORY %s: %s", where, exc.strerror)
        return []
    for name in entries:
        path = Path(where) / name
        try:
            value = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        add_secret(value)
        var = name[len(_PREFIX) :] if name.startswith(_PREFIX) else name
        if _ENV_NAME.match(var) and var not in os.environ:
            os.environ[var] = value
            names.append(var)
    if names:
        log.info("credentials exported to the environment: %s", ", ".join(names))
    return names


def register_secrets(config: Config) -> None:
    """Tell the log formatter every secret value the configuration points at
    (bridge/config.py, `secret_refs`: checked by `parse_config`, so it does not raise
    for a configuration that loaded)."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    for refs in secret_refs(config):
        for value in refs.values:
            add_secret(value)
        for name in refs.envs:
            add_secret(os.environ.get(name))
        for file in refs.files:
            path = Path(file) if os.path.isabs(file) or not creds else Path(creds) / file
            try:
                add_secret(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                pass


def _restart_only(config: Config) -> list[str]:
    """The sections a SIGHUP does not change: the daemon's own, and non-reloadable fronts'."""
    return [*_RESTART_ONLY, *(f.key for f in config.protocols.fronts.values() if not f.reloadable)]


def restart_only_changes(old: Config, new: Config) -> list[str]:
    changed = [f"[{name}]" for name in _RESTART_ONLY if getattr(old, name) != getattr(new, name)]
    keys = [k for k in _restart_only(old) if k not in _RESTART_ONLY]
    changed += [f"[{k}]" for k in keys if old.front_sections.get(k) != new.front_sections.get(k)]
    if old.plugins != new.plugins:
        changed.append("plugins (their back kinds apply now, their fronts at the restart)")
    return changed


async def apply_reload(manager: SessionManager, path: str | None, *, nursery: trio.Nursery) -> tuple[bool, str]:
    """Reload from `path`; (applied, a one-line summary). Never raises for a bad file."""
    old = manager.config
    try:
        new = await trio.to_thread.run_sync(load_config, path)
    except ConfigError as exc:
        from bridge.config_check import describe

        for problem in exc.problems:
            log.error("reload refused, configuration kept: %s", describe(problem, path))
        return False, f"reload failed ({len(exc.problems)} problem(s)); previous configuration kept"
    kept = restart_only_changes(old, new)
    if kept:
        log.warning("reload: %s changed; that takes effect at the next restart", ", ".join(kept))
    kept_fronts = {k: old.front_sections[k] for k in _restart_only(old) if k in old.front_sections}
    merged = msgspec.structs.replace(
        new, front_sections={**new.front_sections, **kept_fronts}, **{name: getattr(old, name) for name in _RESTART_ONLY}
    )
    import_credentials(merged)
    register_secrets(merged)
    added = sorted(set(merged.routes) - set(old.routes))
    removed = sorted(set(old.routes) - set(merged.routes))
    changed = sorted(n for n in set(old.routes) & set(merged.routes) if old.routes[n] != merged.routes[n])
    dropped, retired = manager.reconfigure(merged)
    logging.getLogger().setLevel(getattr(logging, merged.log_level.upper()))
    backs = [b for name, b in dropped.items() if name in removed]
    if retired or backs:
        nursery.start_soon(_retire, manager, retired, backs, merged.daemon.reload_grace_s)
    summary = f"reloaded: {len(merged.routes)} routes; added: {_names(added)}; changed: {_names(changed)}; removed: {_names(removed)}"
    log.info("%s", summary)
    return True, summary


async def _retire(manager: SessionManager, sessions: list[Any], backs: list[Back], grace_s: float) -> None:
    """Removed routes: let their turns finish (then cancel them), close their sessions,
    and end their backs (an A2A client's connections) once no session uses them."""
    cancelled = await manager.drain(grace_s, sessions=sessions)
    if cancelled:
        log.info("reload: %d turn(s) of removed routes cancelled after %g s", cancelled, grace_s)
    for session in sessions:
        await session.close()
    with trio.move_on_after(10):
        while any(manager.live(s.id) is s for s in sessions):
            await trio.sleep(0.05)
    for back in backs:
        # A back is our code: one that fails to close is our bug, logged, and the
        # others still close (STYLE.md rule 17).
        with trio.move_on_after(5, shield=True):
            try:
                await back.aclose()
            except Exception:
                log.exception("reload: a removed route's back raised while closing")


def _names(names: list[str]) -> str:
    return ", ".join(names) or "none"
