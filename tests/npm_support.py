"""The test peers that run on node: Node.js found, and a peer's pinned npm packages
installed from its lockfile (`npm ci`, once, under a file lock shared by parallel runs)."""

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

__all__ = ["node_for", "npm_ci"]


def node_for(what: str) -> str:
    """node (20 or newer) and npm, or the test fails saying what needs them."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            f"node and npm are required for {what} (node: {node or 'missing'}, npm: {npm or 'missing'}); "
            "install Node.js 20 or newer",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(re.match(r"v(\d+)", version).group(1)) < 20:  # type: ignore[union-attr]
        pytest.fail(f"{what} needs Node.js 20 or newer, found {version}", pytrace=False)
    return node


def npm_ci(peer: Path, package: str, *needed: Path) -> None:
    """`npm ci` in `peer` unless `package` is installed at the version package.json pins
    and every `needed` file exists."""
    npm = shutil.which("npm") or "npm"
    pinned = json.loads((peer / "package.json").read_text())["dependencies"][package]
    manifest = peer / "node_modules" / package / "package.json"
    lock = Path(tempfile.gettempdir()) / f"agent-bridge-npm-ci-{zlib.crc32(str(peer).encode()):08x}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        ready = manifest.exists() and json.loads(manifest.read_text())["version"] == pinned
        if not ready or not all(p.exists() for p in needed):
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=peer, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                pytest.fail(f"npm ci in {peer} failed:\n{done.stderr[-3000:]}", pytrace=False)
    missing = [str(p.relative_to(peer)) for p in needed if not p.exists()]
    if missing:
        pytest.fail(f"{package}@{pinned} does not ship {', '.join(missing)}", pytrace=False)
