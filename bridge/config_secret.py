"""Reading a secret from the environment or a file (`token_env` / `token_file`, `url_file`,
`client_secret_file`, ...): bridge/config.py re-exports `read_secret` for its callers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["MAX_SECRET_BYTES", "read_secret", "secret_path"]

# A secret file is a token, a password or a database URL: a few hundred bytes. Past this it
# is the wrong file, and is not read whole (secrets are read where they are used, some on
# every request, so a rotated file counts at once).
MAX_SECRET_BYTES = 64 * 1024


def read_secret(env: str | None, file: str | None) -> str | None:
    """`env`'s value, else `file`'s content (relative: in $CREDENTIALS_DIRECTORY under
    systemd); None if neither yields one. The file must be a regular file of at most
    `MAX_SECRET_BYTES` in UTF-8: anything else (a FIFO, which would block the event
    loop, a device, a directory, a huge or binary file) yields None, which fails closed
    (a front that requires a token then refuses every request)."""
    if env:
        return os.environ.get(env) or None
    if file:
        path = secret_path(file)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = b""
            while len(data) <= MAX_SECRET_BYTES:
                chunk = os.read(fd, MAX_SECRET_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > MAX_SECRET_BYTES:
            return None
        try:
            return data.decode("utf-8").strip() or None
        except UnicodeDecodeError:
            return None
    return None


def secret_path(file: str) -> Path:
    """Where a `*_file` is: a relative path is in $CREDENTIALS_DIRECTORY under systemd
    (`LoadCredential=`), else as given."""
    path = Path(file)
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    return Path(creds) / path if not path.is_absolute() and creds else path
