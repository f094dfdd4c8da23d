"""Route secrets for remote backs: read at use (rotation needs no restart), never shown.

A token comes from an environment variable (`token_env`) or a file (`token_file`; a
relative path is looked up in `$CREDENTIALS_DIRECTORY`, where systemd's
`LoadCredential=` puts it). Problems are reported through the back's own `fail`,
so its message names the route; the value itself is never in a message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from bridge.errors import BackError

__all__ = ["Secret", "read_token"]


class Secret:
    """A token that never shows itself in a repr, a log line or an error message."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


def read_token(token_env: str | None, token_file: str | None, fail: Callable[[str], BackError]) -> Secret | None:
    """The route's token, or None when it has none configured."""
    if token_env:
        value = os.environ.get(token_env, "").strip()
        if not value:
            raise fail(f"the environment variable {token_env} (token_env) is not set")
        return _checked(value, f"${token_env}", fail)
    if token_file:
        path = Path(token_file)
        creds = os.environ.get("CREDENTIALS_DIRECTORY")  # systemd LoadCredential=
        if not path.is_absolute() and creds:
            path = Path(creds) / path
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise fail(f"cannot read token_file {path}: {exc.strerror or exc}") from exc
        if not value:
            raise fail(f"token_file {path} is empty")
        return _checked(value, str(path), fail)
    return None


def _checked(value: str, where: str, fail: Callable[[str], BackError]) -> Secret:
    # httpx would refuse such a header and quote it, secret included, in its error.
    if not value.isprintable() or not value.isascii():
        raise fail(f"the token in {where} holds characters an HTTP header cannot carry")
    return Secret(value)
