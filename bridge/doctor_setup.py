"""`agent-bridge doctor`'s checks of what the config names on this machine, each a row
with a hint when it fails: what would otherwise fail later, inside a turn or at start.

| check | ok when | checked for |
|---|---|---|
| `token_env` | the variable is set and not empty (after systemd credentials are imported) | every back and every front table that has one, `[server] admin_token_env` |
| `token_file` | a regular file of at most 64 KiB that can be read, is not empty and is UTF-8 (a relative path: in $CREDENTIALS_DIRECTORY): what the daemon reads | the same, `admin_token_file` |
| `ca_file` | the file can be read and loads as a PEM bundle of CA certificates | every back and front table that has one |
| `acp_socket` | its directory exists and this user may create the socket there, or may create the directory | `[daemon] acp_socket` (its default path too) |
| `state_dir` | it is a directory this user may write, not writable by others; or it can be created | the SQLite store's directory (`--state-dir`, `[store] state_dir`, the default) |

Secrets are never read into a message: a token's check says only set or not, readable
or not. Every read is bounded (`_MAX_READ` bytes).
"""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path
from typing import Any

from bridge.config import Config
from bridge.config_secret import MAX_SECRET_BYTES, secret_path
from bridge.doctor import Probe

__all__ = ["setup_checks"]

_MAX_READ = MAX_SECRET_BYTES  # a token file larger than this is not a token


def _places(config: Config) -> list[tuple[str, Any]]:
    """Every config table that may name a token or a CA file: (where, its Struct)."""
    places: list[tuple[str, Any]] = [("server", config.server)]
    for name, route in config.routes.items():
        places.append((f"routes.{name}.back", route.back))
        places += [(f"routes.{name}.{key}", settings) for key, settings in sorted(route.front_settings.items())]
    places += [(key, section) for key, section in sorted(config.front_sections.items())]
    return places


def _token_env(where: str, field: str, name: str) -> Probe:
    if os.environ.get(name, "").strip():
        return Probe(where, field, True, f"${name} is set")
    return Probe(
        where,
        field,
        False,
        f"${name} is not set or empty: calls that need this token will fail",
        hint=f"export {name}=... in the daemon's environment, or under systemd LoadCredential={name}:/path/to/file",
    )


_resolve = secret_path  # systemd LoadCredential=


def _token_file(where: str, field: str, file: str) -> Probe:
    """What the daemon will make of it (bridge/config_secret.py `read_secret`), said precisely."""
    path = _resolve(file)
    try:
        info = path.stat()
    except OSError as exc:
        return Probe(where, field, False, f"cannot read {path}: {exc.strerror or exc}", hint=_file_hint(path))
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the daemon; it reads regular files only
        return Probe(where, field, False, f"{path} is not a regular file", hint=f"write the token into a file and point {field} at it")
    if info.st_size > MAX_SECRET_BYTES:
        return Probe(where, field, False, f"{path} holds {info.st_size} bytes, more than a token file may ({MAX_SECRET_BYTES})", hint=f"is {path} the token?")
    try:
        with path.open("rb") as f:
            content = f.read(_MAX_READ)
    except OSError as exc:
        return Probe(where, field, False, f"cannot read {path}: {exc.strerror or exc}", hint=_file_hint(path))
    if not content.strip():
        return Probe(where, field, False, f"{path} is empty", hint=f"write the token into {path}")
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return Probe(where, field, False, f"{path} is not UTF-8 text", hint=f"is {path} the token?")
    return Probe(where, field, True, f"{path} is readable")


def _file_hint(path: Path) -> str:
    if not path.exists():
        return f"check the path (relative paths are looked up in $CREDENTIALS_DIRECTORY under systemd); {path} does not exist"
    return f"let the daemon's user read it (uid {os.getuid()}): chown or chmod {path}"


def _ca_file(where: str, file: str) -> Probe:
    path = Path(file)
    try:
        with path.open("rb"):
            pass
        context = ssl.create_default_context(cafile=str(path))
    except ssl.SSLError as exc:
        return Probe(where, "ca_file", False, f"{path} is not a PEM bundle of CA certificates ({exc.reason or exc})", hint="ca_file must name PEM certificates (-----BEGIN CERTIFICATE-----)")
    except OSError as exc:
        return Probe(where, "ca_file", False, f"cannot read {path}: {exc.strerror or exc}", hint=_file_hint(path))
    count = context.cert_store_stats().get("x509_ca", 0)
    return Probe(where, "ca_file", True, f"{path}: {count} CA certificate{'' if count == 1 else 's'} loaded")


def _creatable(path: Path) -> tuple[bool, str]:
    """Whether this user may create `path` (a directory) where it is missing: the nearest
    existing ancestor is a directory it may write."""
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return False, f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return False, f"{parent} is not writable by this user (uid {os.getuid()})"
    return True, f"{path} will be created (in {parent})"


def _directory(where: str, field: str, path: Path, *, what: str) -> Probe:
    if not path.exists():
        ok, why = _creatable(path)
        hint = None if ok else f"create {path} for the daemon's user, or set {field} to a directory it owns"
        return Probe(where, field, ok, why, hint=hint)
    if not path.is_dir():
        return Probe(where, field, False, f"{path} is not a directory", hint=f"set {field} to a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        return Probe(where, field, False, f"{path} is not writable by this user (uid {os.getuid()})", hint=f"chown {path} to the daemon's user, or set {field} elsewhere")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:  # a sticky directory (/tmp) keeps others' hands off
        return Probe(where, field, False, f"{path} is writable by other users (mode {mode:04o}): they could replace {what}", hint=f"chmod 700 {path}")
    return Probe(where, field, True, f"{path}: writable, mode {mode:04o}")


def setup_checks(config: Config, state_dir: str) -> list[Probe]:
    """Every check of the table above, in the config's order."""
    rows: list[Probe] = []
    for where, table in _places(config):
        for env_field, file_field in (("token_env", "token_file"), ("admin_token_env", "admin_token_file")):
            env, file = getattr(table, env_field, None), getattr(table, file_field, None)
            has_file = isinstance(file, str) and bool(file)
            # Where both are allowed (the admin token), the file is used when the variable is unset.
            if isinstance(env, str) and env and not (has_file and not os.environ.get(env, "").strip()):
                rows.append(_token_env(where, env_field, env))
            elif has_file:
                rows.append(_token_file(where, file_field, str(file)))
        ca = getattr(table, "ca_file", None)
        if isinstance(ca, str) and ca:
            rows.append(_ca_file(where, ca))
    want = config.daemon.acp_socket
    if want is not False:
        from bridge.shim import default_socket_path

        socket_path = Path(want if isinstance(want, str) else default_socket_path())
        rows.append(_directory("daemon", "acp_socket", socket_path.parent, what="the ACP socket"))
    if not config.store.postgres:
        rows.append(_directory("store", "state_dir", Path(state_dir), what="the session store"))
    return rows
