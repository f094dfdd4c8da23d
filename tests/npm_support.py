"""Node test peers: node itself, and a peer directory's npm dependencies from its committed lockfile.

`npm_ci(dir)` runs `npm ci` in `dir` when its node_modules do not hold exactly the
versions its package.json pins, one `npm ci` per directory at a time (pytest sessions
sharing a checkout take a file lock). Node 20+ and npm are required: without them the
tests that need them fail, they do not skip.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

__all__ = ["node_exe", "npm_ci"]

NODE_MAJOR = 20


def node_exe() -> str:
    """node's path, failing the test when node (20 or newer) or npm is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            f"node and npm are required for the Node.js SDK peers (node: {node or 'missing'}, npm: {npm or 'missing'}); "
            f"install Node.js {NODE_MAJOR} or newer",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(re.match(r"v(\d+)", version).group(1)) < NODE_MAJOR:  # type: ignore[union-attr]
        pytest.fail(f"the Node.js SDK peers need Node.js {NODE_MAJOR} or newer, found {version} at {node}", pytrace=False)
    return node


def _stale(dir: Path) -> list[str]:
    """The direct dependencies whose installed version is not the one the lockfile pins."""
    names = json.loads((dir / "package.json").read_text()).get("dependencies", {})
    locked = json.loads((dir / "package-lock.json").read_text())["packages"]
    out = []
    for name in names:
        version = locked[f"node_modules/{name}"]["version"]
        manifest = dir / "node_modules" / name / "package.json"
        if not manifest.exists() or json.loads(manifest.read_text()).get("version") != version:
            out.append(f"{name}@{version}")
    return out


def npm_ci(dir: Path) -> None:
    """`dir`'s dependencies installed from its lockfile (`npm ci`, once, under a lock)."""
    node_exe()
    npm = shutil.which("npm")
    lock = Path(tempfile.gettempdir()) / f"agent-bridge-npm-ci-{zlib.crc32(str(dir).encode()):08x}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        if _stale(dir):
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=dir, capture_output=True, text=True, timeout=600)  # type: ignore[list-item]
            if done.returncode != 0:
                pytest.fail(f"npm ci in {dir.name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}", pytrace=False)
        if left := _stale(dir):
            pytest.fail(f"npm ci in {dir.name} left {left} not installed as package.json pins", pytrace=False)
