"""Imports go one way (STYLE.md rules 1 and 4).

- `bridge.core`, `bridge.schema` and `bridge.codecs` are sans-I/O: no trio, no
  network library, nothing from the layers above them. Every import counts,
  including `from x import y` and imports inside functions.
- `bridge.cli` and `bridge.fronts.acp.front` (what an editor spawns) load no HTTP server,
  HTTP client or MCP SDK, so `agent-bridge acp` starts fast (DESIGN.md, "Libraries").
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

BRIDGE = Path(__file__).resolve().parent.parent / "bridge"
SANS_IO = ["core", "schema", "codecs"]

FORBIDDEN_LIBRARIES = {"trio", "trio_websocket", "hypercorn", "httpx", "httpcore", "anyio", "mcp", "sniffio"}
FORBIDDEN_BRIDGE = {"bridge.fronts", "bridge.backs", "bridge.session", "bridge.daemon", "bridge.cli", "bridge.store", "bridge.render"}


def module_name(path: Path, root: Path = BRIDGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = BRIDGE) -> list[tuple[int, str]]:
    """Every module a file imports, anywhere in it, as absolute dotted names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            # `from bridge import session` imports the module bridge.session.
            found += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in {
            "import_module",
            "__import__",
        }:
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def forbidden(name: str) -> bool:
    top = name.split(".")[0]
    if top in FORBIDDEN_LIBRARIES:
        return True
    return any(name == b or name.startswith(b + ".") for b in FORBIDDEN_BRIDGE)


SANS_IO_FILES = sorted(p for layer in SANS_IO for p in (BRIDGE / layer).rglob("*.py"))


def test_the_walk_finds_the_sans_io_modules() -> None:
    names = {module_name(p) for p in SANS_IO_FILES}
    assert {"bridge.core.turn", "bridge.core.events", "bridge.schema.acp", "bridge.codecs.acp", "bridge.codecs.ndjson"} <= names


@pytest.mark.parametrize("path", SANS_IO_FILES, ids=module_name)
def test_sans_io_layers_import_nothing_above_them(path: Path) -> None:
    bad = [f"{path.relative_to(BRIDGE.parent)}:{line}: {name}" for line, name in imports_of(path) if forbidden(name)]
    assert bad == []


def test_core_and_schema_do_not_import_codecs() -> None:
    # core and schema sit at the bottom: codecs are built on them, not the other way.
    for layer in ("core", "schema"):
        for path in (BRIDGE / layer).rglob("*.py"):
            bad = [n for _, n in imports_of(path) if n == "bridge.codecs" or n.startswith("bridge.codecs.")]
            assert bad == [], path


def test_core_imports_only_core() -> None:
    for path in (BRIDGE / "core").rglob("*.py"):
        ours = [n for _, n in imports_of(path) if n.startswith("bridge")]
        assert all(n.startswith("bridge.core") for n in ours), (path, ours)


def test_the_checker_catches_every_import_form(tmp_path: Path) -> None:
    pkg = tmp_path / "bridge" / "codecs"
    pkg.mkdir(parents=True)
    probe = pkg / "probe.py"
    probe.write_text(
        "import trio\n"
        "import httpx.client as c\n"
        "from hypercorn.config import Config\n"
        "from .. import session\n"
        "from ..fronts import acp\n"
        "from bridge import daemon\n"
        "def later():\n"
        "    import anyio\n"
        "    from bridge.store.memory import MemoryStore\n"
        "    importlib.import_module('trio_websocket')\n",
        encoding="utf-8",
    )
    names = [n for _, n in imports_of(probe, root=tmp_path / "bridge") if forbidden(n)]
    for expected in [
        "trio",
        "httpx.client",
        "hypercorn.config",
        "bridge.session",
        "bridge.fronts",
        "bridge.daemon",
        "anyio",
        "bridge.store.memory",
        "trio_websocket",
    ]:
        assert expected in names, (expected, names)


# -- what the editor-spawned command loads -------------------------------------------

_PROBE = """
import json, sys
import bridge.cli
import bridge.fronts.acp.front
print(json.dumps(sorted(sys.modules)))
"""


def test_acp_command_imports_no_server_http_client_or_mcp() -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(proc.stdout)
    heavy = sorted(m for m in loaded if m.split(".")[0] in {"hypercorn", "httpx", "httpcore", "mcp", "h11", "h2", "starlette"})
    assert heavy == []
    assert "bridge.fronts.acp.front" in loaded  # the probe did import it


def test_sans_io_layers_load_without_trio_in_a_fresh_interpreter() -> None:
    probe = (
        "import json, sys\n"
        "import bridge.core.turn, bridge.core.events, bridge.core.commands\n"
        "import bridge.schema.acp, bridge.schema.jsonrpc\n"
        "import bridge.codecs.acp, bridge.codecs.jsonrpc, bridge.codecs.ndjson\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(proc.stdout)
    assert sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN_LIBRARIES) == []
    assert sorted(m for m in loaded if forbidden(m) and m.startswith("bridge")) == []
