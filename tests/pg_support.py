"""A throwaway PostgreSQL server for the tests: Debian's `postgresql` package, a cluster
made with `initdb` in a temp dir, listening only on a unix socket there (no TCP port),
started with `pg_ctl` and stopped when the test session ends.

PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user
the Debian package creates and its programs run as that user. The socket directory is
world-writable so any local user may connect; `trust` authentication is enough for a
socket nobody else can reach.

`PgServer.fresh_db()` makes a new database per test (`CREATE DATABASE ... TEMPLATE
template0`, a few milliseconds), so tests never see each other's rows.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = ["PgServer", "pg_bindir"]


def pg_bindir() -> str:
    """The directory of Debian's PostgreSQL server programs (the newest installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (`.ci/run` does)")
    return os.path.dirname(found[-1])


class PgServer:
    def __init__(self) -> None:
        self.bindir = pg_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="bridge-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        os.chmod(self.root, 0o755)
        os.chmod(self.socket_dir, 0o1777)
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.socket_dir, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres" if os.geteuid() == 0 else os.environ.get("USER") or "postgres"

    def _run(self, *argv: str) -> None:
        proc = subprocess.run([*self._as_user, *argv], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")

    def start(self) -> None:
        self._run(f"{self.bindir}/initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8", "--no-sync")
        opts = f"-c listen_addresses='' -c unix_socket_directories={self.socket_dir} -c fsync=off -c max_connections=200"
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL over the unix socket (the host is the socket's directory)."""
        return f"postgresql://{self.user}@/{dbname}?host={self.socket_dir}"

    def fresh_db(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)
