"""Imports go one way (STYLE.md rules 1 and 4; ARCHITECTURE.md, "Layers").

Every module of `bridge/` belongs to one layer: the package it sits in under `bridge/`
(`bridge.fronts.a2a.tasks` is in `fronts`), except that every module named `config`
(and `bridge.config_*`, its helpers, but for `config_cli`, an app module as `store_cli`
is) is in the `config` layer, and `bridge.registry` is its own layer. `ALLOWED` below is
the whole graph; this file checks, on the source (so imports inside functions and
under `if TYPE_CHECKING:` count as much as the ones at the top):

- every import is an allowed arrow between layers (`fronts` never import `backs`,
  `backs` never import `session`, `prompts` never import `backs`, nothing goes up);
- no import cycle between modules (each one reported as its chain of modules);
- `core`, `schema` and `codecs` import no I/O module, and a fresh interpreter loads
  every one of their modules without loading one;
- `bridge.cli` and `bridge.fronts.acp.front` (what an editor spawns) load no HTTP
  server, HTTP client or MCP SDK, so `agent-bridge acp` starts fast (DESIGN.md,
  "Libraries"); nor do the protocol packages' `__init__` (their registry
  declarations), which the daemon imports for every protocol, used or not.

Run as a script to check another tree: `python tests/test_layering.py PATH/bridge`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

__all__ = [
    "ALLOWED",
    "IO_MODULES",
    "Import",
    "check_arrows",
    "check_cycles",
    "check_sans_io",
    "check_tree",
    "imports_of",
    "layer_of",
    "module_name",
    "modules_of",
]

BRIDGE = Path(__file__).resolve().parent.parent / "bridge"

# Modules that do I/O or run an event loop: the sans-I/O layers import none of them.
IO_MODULES = frozenset(
    {
        "trio",
        "trio_websocket",
        "hypercorn",
        "httpx",
        "httpcore",
        "anyio",
        "sniffio",
        "mcp",
        "sqlite3",
        "socket",
        "subprocess",
        "threading",
        "asyncio",
        "selectors",
    }
)
SANS_IO = ("core", "schema", "codecs")

# The app modules at the top of `bridge/`: they wire the layers below together.
APP_MODULES = frozenset(
    {"daemon", "service", "doctor", "doctor_setup", "config_cli", "reload", "health", "metrics", "render", "shim", "systemd", "store_cli", "workers"}
    | {"ask", "ask_answers", "ask_terminal", "status_line"}  # `agent-bridge ask`
)
# bridge/config.py's helpers: the walk for every problem, the line scanner, the
# environment overrides, the JSON Schema.
CONFIG_MODULES = frozenset({"config_check", "config_env", "config_lines", "config_schema", "config_secret"})
PACKAGE_LAYERS = frozenset(
    {"core", "schema", "codecs", "store", "cluster", "transport", "prompts", "backs", "session", "fronts", "telemetry"}
)

_BELOW_BACKS = frozenset({"prompts", "transport", "store", "codecs", "schema", "core", "config", "registry"})
_BELOW_SESSION = _BELOW_BACKS | {"backs", "cluster"}
_BELOW_APP = _BELOW_SESSION | {"session", "fronts"}

# layer -> the layers it may import (besides itself and `EVERYONE_MAY_IMPORT`).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "schema": frozenset({"core"}),
    "codecs": frozenset({"schema", "core"}),
    # Declarations only: it finds protocol packages with `importlib.import_module` on
    # names it builds at run time, and may name other layers' types for the type
    # checker alone (see `_counts`).
    "registry": frozenset(),
    # Settings import only settings (and the registry, to build the union of back kinds).
    "config": frozenset({"core", "registry"}),
    "store": frozenset({"core", "config"}),
    # Several instances on one store: leases, forwarded commands, notifications.
    "cluster": frozenset({"store", "core", "config"}),
    "transport": frozenset({"codecs", "schema", "core", "config"}),
    "prompts": frozenset({"transport", "codecs", "schema", "core", "config"}),
    "backs": _BELOW_BACKS,
    "session": _BELOW_SESSION,
    "fronts": _BELOW_BACKS | {"session"},  # never backs: fronts meet backs only in a session
    "app": _BELOW_APP,
    "cli": _BELOW_APP | {"app"},
    "main": frozenset({"cli"}),
    "errors": frozenset(),
    "logs": frozenset(),
    # Tracing: the standard library at import; the OpenTelemetry SDK only when turned on.
    "telemetry": frozenset(),
    "bridge": frozenset(),  # the package itself: `__version__` and nothing else
}
# The error hierarchy, logging, tracing and the version belong to every layer.
EVERYONE_MAY_IMPORT = frozenset({"errors", "logs", "telemetry", "bridge"})


class Import(NamedTuple):
    """One import statement (or `import_module("...")` call) in one module."""

    importer: str  # dotted name of the importing module
    path: Path  # its file
    line: int
    target: str  # the dotted module imported, resolved to a module of the tree when it is one
    deferred: bool  # inside a function body
    type_only: bool  # under `if TYPE_CHECKING:`

    def where(self, root: Path) -> str:
        how = ", type-only" if self.type_only else ", in a function" if self.deferred else ""
        return f"{self.path.relative_to(root.parent)}:{self.line}{how}"


def module_name(path: Path, root: Path = BRIDGE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(root: Path = BRIDGE) -> dict[str, Path]:
    """Every module of the tree under `root`, by dotted name."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def layer_of(module: str) -> str | None:
    """The layer of a `bridge` module (see the module docstring), None if it has none."""
    parts = module.split(".")
    if parts[0] != "bridge":
        return None
    if len(parts) == 1:
        return "bridge"
    head = parts[1]
    if parts[-1] == "config" or (len(parts) == 2 and head in CONFIG_MODULES):
        return "config"
    if head == "registry":
        return "registry"
    if head in PACKAGE_LAYERS:
        return head
    if len(parts) > 2:
        return None  # a package under bridge/ that no layer claims
    if head in APP_MODULES:
        return "app"
    if head == "__main__":
        return "main"
    if head in {"cli", "errors", "logs"}:
        return head
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportFinder(ast.NodeVisitor):
    """Collects (line, dotted name, deferred, type_only) for every import form."""

    def __init__(self, package: str, known: Iterable[str]) -> None:
        self.package = package
        self.known = frozenset(known)
        self.found: list[tuple[int, str, bool, bool]] = []
        self._depth = 0  # function bodies we are in
        self._typing = 0  # `if TYPE_CHECKING:` bodies we are in

    def _add(self, line: int, name: str) -> None:
        self.found.append((line, name, self._depth > 0, self._typing > 0))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._typing += 1
        for child in node.body:
            self.visit(child)
        self._typing -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node.lineno, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        # `from bridge.store import sqlite` imports the module bridge.store.sqlite;
        # `from bridge.store import Store` imports the package bridge.store.
        submodules = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in self.known]
        for name in submodules:
            self._add(node.lineno, name)
        if len(submodules) < len(node.names):
            self._add(node.lineno, source)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if called in {"import_module", "__import__"} and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._add(node.lineno, first.value)
        self.generic_visit(node)


def _ours(name: str) -> bool:
    return name == "bridge" or name.startswith("bridge.")


def _resolve(name: str, known: frozenset[str]) -> str:
    """A `bridge` name as the longest module of the tree it names (others unchanged)."""
    if not _ours(name):
        return name
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) or name


def imports_of(path: Path, root: Path = BRIDGE, known: Iterable[str] | None = None) -> list[Import]:
    """Every import in a file, anywhere in it, as absolute dotted names."""
    known_set = frozenset(modules_of(root) if known is None else known)
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    finder = _ImportFinder(package, known_set)
    finder.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return [
        Import(name, path, line, _resolve(target, known_set), deferred, type_only)
        for line, target, deferred, type_only in finder.found
    ]


def _all_imports(root: Path) -> list[Import]:
    modules = modules_of(root)
    return [imp for path in modules.values() for imp in imports_of(path, root, modules)]


def _counts(imp: Import) -> bool:
    """Whether an import is an edge of the graph: all are, but the registry's type-only
    ones, which name the types its declarations hold (Route, Back, SessionManager)."""
    return not (imp.type_only and layer_of(imp.importer) == "registry")


def check_layers(root: Path = BRIDGE) -> list[str]:
    """Modules that belong to no layer."""
    return [
        f"{path.relative_to(root.parent)}: {name} belongs to no layer (add it to a package under "
        "bridge/, or to APP_MODULES in tests/test_layering.py)"
        for name, path in modules_of(root).items()
        if layer_of(name) is None
    ]


def check_arrows(root: Path = BRIDGE, imports: list[Import] | None = None) -> list[str]:
    """Every import between layers that `ALLOWED` does not draw."""
    bad = []
    for imp in _all_imports(root) if imports is None else imports:
        source, target = layer_of(imp.importer), layer_of(imp.target)
        if source is None or target is None or source == target or not _counts(imp):
            continue
        if target in EVERYONE_MAY_IMPORT or target in ALLOWED[source]:
            continue
        may = ", ".join(sorted(ALLOWED[source])) or "nothing"
        bad.append(f"{imp.where(root)}: {imp.importer} ({source}) imports {imp.target} ({target}); {source} may import {may}")
    return bad


def check_sans_io(root: Path = BRIDGE, imports: list[Import] | None = None) -> list[str]:
    """Imports of I/O modules from the sans-I/O layers."""
    return [
        f"{imp.where(root)}: {imp.importer} ({layer_of(imp.importer)}, sans-I/O) imports {imp.target}"
        for imp in (_all_imports(root) if imports is None else imports)
        if layer_of(imp.importer) in SANS_IO and imp.target.split(".")[0] in IO_MODULES
    ]


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> Iterator[list[str]]:
    """Tarjan's algorithm, iterative so that no chain of imports meets the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    yield sorted(component)


def _shortest_cycle(graph: dict[str, dict[str, Import]], start: str, members: set[str]) -> list[str]:
    """The shortest chain start → … → start inside one strongly connected component."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, {})):
                if child not in members:
                    continue
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(parent[chain[-1]])
                    return [*reversed(chain), start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return [start, start]


def check_cycles(root: Path = BRIDGE, imports: list[Import] | None = None) -> list[str]:
    """Every import cycle between modules, as its chain of modules and import lines."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in _all_imports(root) if imports is None else imports:
        if _ours(imp.target) and imp.target != imp.importer and _counts(imp):
            graph.setdefault(imp.importer, {}).setdefault(imp.target, imp)
    found = []
    for component in _strongly_connected(graph):
        members = set(component)
        covered: set[str] = set()
        # One chain through each module of the knot, until every module is in one.
        for start in component if len(component) > 1 else []:
            if start in covered:
                continue
            chain = _shortest_cycle(graph, start, members)
            covered.update(chain)
            steps = " → ".join(f"{a} [{graph[a][b].where(root)}]" for a, b in zip(chain, chain[1:], strict=False))
            found.append(f"import cycle: {steps} → {chain[-1]}")
    return found


def check_tree(root: Path = BRIDGE) -> list[str]:
    """Every layering fault in the tree under `root`."""
    imports = _all_imports(root)
    return check_layers(root) + check_arrows(root, imports) + check_sans_io(root, imports) + check_cycles(root, imports)


# -- the real tree -------------------------------------------------------------------

_IMPORTS = _all_imports(BRIDGE)


def test_every_module_has_a_layer() -> None:
    faults = check_layers()
    assert not faults, "\n".join(faults)


def test_the_walk_finds_the_tree() -> None:
    names = set(modules_of())
    assert {"bridge.core.turn", "bridge.schema.acp", "bridge.codecs.acp", "bridge.config", "bridge.cli"} <= names
    assert {layer_of(n) for n in names} >= {"core", "schema", "codecs", "config", "store", "backs", "fronts", "app", "cli"}


def test_imports_follow_the_allowed_arrows() -> None:
    faults = check_arrows(BRIDGE, _IMPORTS)
    assert not faults, "\n".join(faults)


def test_sans_io_layers_import_no_io_module() -> None:
    faults = check_sans_io(BRIDGE, _IMPORTS)
    assert not faults, "\n".join(faults)


def test_no_import_cycles() -> None:
    faults = check_cycles(BRIDGE, _IMPORTS)
    assert not faults, "\n".join(faults)


# -- what a fresh interpreter loads --------------------------------------------------

_SANS_IO_PROBE = """
import importlib, json, logging, sys
# Every layer may log (STYLE.md rule 10), and logging loads threading for its locks:
# what logging loads is the baseline, the rest must come from the modules themselves.
baseline = set(sys.modules)
for name in {names!r}:
    importlib.import_module(name)
print(json.dumps(sorted(set(sys.modules) - baseline)))
"""


def test_every_sans_io_module_loads_without_io_in_a_fresh_interpreter() -> None:
    names = sorted(n for n in modules_of() if layer_of(n) in SANS_IO)
    assert len([n for n in names if n.startswith("bridge.codecs.")]) > 3  # walked, not listed
    probe = _SANS_IO_PROBE.format(names=names)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(proc.stdout)
    assert set(names) <= set(loaded) | {"bridge"}
    bad = _io_or_above_in(loaded)
    assert not bad, f"loaded {', '.join(bad)}: " + "; ".join(_who_loads(names))


def _io_or_above_in(loaded: list[str]) -> list[str]:
    """The I/O packages (top-level names) and upper-layer bridge modules in `loaded`."""
    io = {m.split(".")[0] for m in loaded if m.split(".")[0] in IO_MODULES}
    above = {m for m in loaded if m.startswith("bridge.") and layer_of(m) not in {*SANS_IO, *EVERYONE_MAY_IMPORT}}
    return sorted(io | above)


def _who_loads(names: list[str]) -> list[str]:
    """Each sans-I/O module that, alone in a fresh interpreter, loads a module it must not."""
    found = []
    for name in names:
        probe = _SANS_IO_PROBE.format(names=[name])
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        bad = _io_or_above_in(json.loads(proc.stdout))
        if bad:
            found.append(f"{name} loads {', '.join(bad)}")
    return found


# An HTTP server or client, a WebSocket client, the MCP SDK: each costs import time.
_HEAVY = frozenset({"hypercorn", "httpx", "httpcore", "mcp", "h11", "h2", "starlette", "trio_websocket"})

_ACP_PROBE = """
import json, sys
import bridge.cli
import bridge.fronts.acp.front
print(json.dumps(sorted(sys.modules)))
"""


def test_acp_command_imports_no_server_http_client_or_mcp() -> None:
    proc = subprocess.run([sys.executable, "-c", _ACP_PROBE], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(proc.stdout)
    heavy = sorted(m for m in loaded if m.split(".")[0] in _HEAVY)
    assert heavy == []
    assert "bridge.fronts.acp.front" in loaded  # the probe did import it


def test_protocol_package_declarations_load_no_server_client_or_mcp() -> None:
    # The registry imports every `bridge/backs/<kind>/` and `bridge/fronts/<name>/`
    # package to read its declaration; the implementation loads when a route uses it.
    packages = sorted(
        name
        for name, path in modules_of().items()
        if path.name == "__init__.py" and name.count(".") == 2 and name.split(".")[1] in {"backs", "fronts"}
    )
    assert "bridge.backs.a2a" in packages and "bridge.fronts.mcp" in packages
    probe = f"import importlib, json, sys\nfor name in {packages!r}:\n    importlib.import_module(name)\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    heavy = sorted({m.split(".")[0] for m in json.loads(proc.stdout)} & _HEAVY)
    assert heavy == []


# -- the checker itself, on synthetic trees ------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "bridge"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(text, encoding="utf-8")
    return root


def test_the_checker_catches_every_import_form(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "codecs/probe.py": "import trio\n"
            "import httpx.client as c\n"
            "from hypercorn.config import Config\n"
            "from .. import session\n"
            "from ..fronts import acp\n"
            "from bridge import daemon\n"
            "from bridge.store import Store\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    import sqlite3\n"
            "def later():\n"
            "    import anyio\n"
            "    from bridge.store.memory import MemoryStore\n"
            "    importlib.import_module('trio_websocket')\n"
            "    __import__('bridge.prompts.text')\n"
            "lazy = lambda: __import__('threading')\n",
            "session.py": "",
            "daemon.py": "",
            "fronts/acp/__init__.py": "",
            "store/memory.py": "",
            "prompts/text.py": "",
        },
    )
    probe = root / "codecs" / "probe.py"
    names = {imp.target for imp in imports_of(probe, root)}
    expected = {
        "trio",
        "httpx.client",
        "hypercorn.config",
        "bridge.session",
        "bridge.fronts.acp",
        "bridge.daemon",
        "bridge.store",
        "sqlite3",
        "anyio",
        "bridge.store.memory",
        "trio_websocket",
        "bridge.prompts.text",
        "threading",
    }
    assert expected <= names, expected - names
    faults = "\n".join(check_tree(root))
    for name in expected:
        assert f"imports {name}" in faults, name
    assert "codecs/probe.py:10, type-only: bridge.codecs.probe (codecs, sans-I/O) imports sqlite3" in faults
    assert "codecs/probe.py:13, in a function: bridge.codecs.probe (codecs) imports bridge.store.memory (store)" in faults


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/events.py": "import msgspec\n",
            "schema/acp.py": "from bridge.core.events import *\n",
            "codecs/acp.py": "from ..schema import acp\nfrom bridge import errors, logs\n",
            "errors.py": "",
            "logs.py": "import logging\n",
            "registry.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bridge.config import Route\n",
            "config.py": "from bridge.registry import BackKind\nfrom bridge.backs.a2a.config import A2ABackConfig\n",
            "backs/a2a/config.py": "from bridge import registry\n",
            "backs/a2a/back.py": "from .config import A2ABackConfig\nfrom bridge.transport import procgroup\n",
            "transport/procgroup.py": "import trio\nfrom bridge.codecs import acp\n",
            "session/live.py": "from bridge.backs.a2a.back import x\n",
            "fronts/acp/front.py": "from bridge.session.live import x\nfrom bridge.fronts.acp import config\n",
            "fronts/acp/config.py": "",
            "daemon.py": "from bridge.fronts.acp.front import x\nfrom bridge.backs import a2a\n",
            "cli.py": "from bridge import daemon\n",
            "__main__.py": "from bridge.cli import main\n",
        },
    )
    assert check_tree(root) == []


def test_the_checker_reports_a_cycle_as_its_chain(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "backs/chat/back.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .link import Link\n",
            "backs/chat/link.py": "def later():\n    from bridge.backs.chat.turn import Turn\n",
            "backs/chat/turn.py": "import bridge.backs.chat.back\n",
            "backs/a2a/back.py": "from bridge.backs.a2a import turn\n",
            "backs/a2a/turn.py": "from .back import A2ABack\n",
        },
    )
    assert check_tree(root) == [
        "import cycle: bridge.backs.a2a.back [bridge/backs/a2a/back.py:1] → "
        "bridge.backs.a2a.turn [bridge/backs/a2a/turn.py:1] → bridge.backs.a2a.back",
        "import cycle: bridge.backs.chat.back [bridge/backs/chat/back.py:3, type-only] → "
        "bridge.backs.chat.link [bridge/backs/chat/link.py:2, in a function] → "
        "bridge.backs.chat.turn [bridge/backs/chat/turn.py:1] → bridge.backs.chat.back",
    ]


@pytest.mark.parametrize(
    ("importer", "imported", "fault"),
    [
        ("core/turn.py", "schema/acp.py", "bridge.core.turn (core) imports bridge.schema.acp (schema); core may import nothing"),
        ("codecs/acp.py", "store/base.py", "bridge.codecs.acp (codecs) imports bridge.store.base (store)"),
        ("config.py", "backs/base.py", "bridge.config (config) imports bridge.backs.base (backs)"),
        ("registry.py", "config.py", "bridge.registry (registry) imports bridge.config (config)"),
        ("transport/ndjson.py", "prompts/text.py", "bridge.transport.ndjson (transport) imports bridge.prompts.text (prompts)"),
        ("fronts/a2a/front.py", "backs/a2a/back.py", "bridge.fronts.a2a.front (fronts) imports bridge.backs.a2a.back (backs)"),
        ("backs/acp/back.py", "session/live.py", "bridge.backs.acp.back (backs) imports bridge.session.live (session)"),
        ("backs/acp/back.py", "fronts/http.py", "bridge.backs.acp.back (backs) imports bridge.fronts.http (fronts)"),
        ("prompts/stdio.py", "backs/procgroup.py", "bridge.prompts.stdio (prompts) imports bridge.backs.procgroup (backs)"),
        ("session/live.py", "fronts/outbox.py", "bridge.session.live (session) imports bridge.fronts.outbox (fronts)"),
        ("fronts/http.py", "daemon.py", "bridge.fronts.http (fronts) imports bridge.daemon (app)"),
        ("daemon.py", "cli.py", "bridge.daemon (app) imports bridge.cli (cli)"),
    ],
)
def test_the_checker_catches_an_arrow_the_graph_does_not_draw(
    tmp_path: Path, importer: str, imported: str, fault: str
) -> None:
    target = "bridge." + imported.removesuffix(".py").replace("/", ".")
    root = _tree(tmp_path, {importer: f"def later():\n    import {target}\n", imported: ""})
    faults = check_tree(root)
    assert len(faults) == 1 and fault in faults[0], faults


def test_the_checker_catches_a_module_with_no_layer(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"gadgets/thing.py": "", "console.py": ""})
    assert [f.split(":")[0] for f in check_tree(root)] == ["bridge/console.py", "bridge/gadgets/__init__.py", "bridge/gadgets/thing.py"]


if __name__ == "__main__":
    faults = check_tree(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else BRIDGE)
    print("\n".join(faults) or "no layering faults")
    sys.exit(1 if faults else 0)
