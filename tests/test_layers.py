"""The package's import graph: layers point one way and nothing imports in a circle, module by
module and folder by folder (each top-level package holds one layer).

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a type-only
import that points upward is still a dependency a reader has to follow, and an import moved
into a function to dodge a cycle is still the cycle. The layers, lowest first, are listed in
``docs/architecture.md``; a new top-level module must be given a layer here before it lands.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "lockgate"

# Lowest first. A module may import from its own layer or a lower one.
DEFINITIONS, STORE, GATE, MACHINERY, SWEEPS, INSPECT, SURFACES = range(7)
LAYER_NAMES = ("definitions", "store", "gate", "dispatcher/executor", "sweeps", "inspect", "surfaces")

# Longest prefix wins.
LAYERS: dict[str, int] = {
    "lockgate": SURFACES,  # the package's public names re-export every layer
    "lockgate.__main__": SURFACES,
    "lockgate.app": DEFINITIONS,
    "lockgate.definitions": DEFINITIONS,
    "lockgate.controls": DEFINITIONS,
    "lockgate.plan": DEFINITIONS,
    "lockgate.schedule": DEFINITIONS,
    "lockgate.schedule_options": DEFINITIONS,
    "lockgate.crypto": DEFINITIONS,
    "lockgate.durations": DEFINITIONS,
    "lockgate.errors": DEFINITIONS,
    "lockgate.serde": DEFINITIONS,
    "lockgate.ids": DEFINITIONS,
    "lockgate.clock": DEFINITIONS,
    "lockgate.handles": DEFINITIONS,
    "lockgate.records": DEFINITIONS,
    "lockgate.context": DEFINITIONS,
    "lockgate.compensation": DEFINITIONS,
    "lockgate.events": DEFINITIONS,
    "lockgate.origin": DEFINITIONS,
    "lockgate.observer": DEFINITIONS,
    "lockgate.recording": DEFINITIONS,
    "lockgate.queues": DEFINITIONS,
    "lockgate.routing": DEFINITIONS,
    "lockgate.flowcontrol": DEFINITIONS,
    "lockgate.buckets": DEFINITIONS,
    "lockgate.history": DEFINITIONS,
    "lockgate.names": DEFINITIONS,
    "lockgate.matching": DEFINITIONS,
    "lockgate.callbacks": DEFINITIONS,
    "lockgate.webhooks": DEFINITIONS,
    "lockgate.streams": DEFINITIONS,
    "lockgate.store": STORE,
    "lockgate.gate": GATE,
    "lockgate.engine": MACHINERY,
    "lockgate.facades": SURFACES,  # Client and Engine; the Client's verbs read flow and trace through inspect/
    "lockgate.sweeps": SWEEPS,
    "lockgate.inspect": INSPECT,
    "lockgate.cli": SURFACES,
    "lockgate.http": SURFACES,
    "lockgate.dashboard": SURFACES,
    "lockgate.testing": SURFACES,
    "lockgate.demo_app": SURFACES,
    # Durable Pydantic AI agents (the optional ``ai`` extra): written against the body's ``Context``
    # alone, like a user's workflow; nothing of lockgate imports it, so it sits with the surfaces.
    "lockgate.ai": SURFACES,
}

# Imports inside a function that are not there to dodge a cycle: the store opens the driver it
# is asked for, so that SQLite users never import psycopg.
LAZY_ALLOWED = {
    ("lockgate.store.__init__", "lockgate.store.sqlite"),
    ("lockgate.store.__init__", "lockgate.store.postgres.__init__"),
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return f"{name}.__init__" in modules


def _resolve(importer: str, level: int, module: str | None, modules: dict[str, Path]) -> str:
    if level == 0:
        return module or ""
    parts = importer.split(".")
    base = parts[:-1]  # the importer's package (an __init__ is its own package's member)
    if parts[-1] == "__init__":
        base = parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *(module.split(".") if module else [])])


def _canonical(name: str, modules: dict[str, Path]) -> str | None:
    if name in modules:
        return name
    if f"{name}.__init__" in modules:
        return f"{name}.__init__"
    return None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """Every lockgate module ``name`` imports, and whether the import sits inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = _canonical(alias.name, modules)
                    if target:
                        found.append((target, in_function))
            elif isinstance(child, ast.ImportFrom):
                source = _resolve(name, child.level, child.module, modules)
                if not source.startswith("lockgate"):
                    continue
                plain = False
                for alias in child.names:
                    sub = _canonical(f"{source}.{alias.name}", modules)
                    if sub:
                        found.append((sub, in_function))
                    else:
                        plain = True
                target = _canonical(source, modules)
                if plain and target:
                    found.append((target, in_function))
            visit(child, nested)

    visit(tree, False)
    return [(t, f) for t, f in found if t != name]


def _layer(name: str) -> int:
    name = name.removesuffix(".__init__")
    best = ""
    for prefix in LAYERS:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return LAYERS[best]


GRAPH = {name: _imports(name, path, _modules()) for name, path in _modules().items()}


def test_every_module_has_a_layer() -> None:
    unplaced = [n for n in GRAPH if n.count(".") == 1 and n.removesuffix(".__init__") not in LAYERS]
    assert not unplaced, f"give these modules a layer in tests/test_layers.py: {unplaced}"


def test_no_upward_import() -> None:
    upward = [
        f"{src} ({LAYER_NAMES[_layer(src)]}) imports {dst} ({LAYER_NAMES[_layer(dst)]})"
        for src, targets in GRAPH.items()
        for dst, _ in targets
        if _layer(dst) > _layer(src)
    ]
    assert not upward, "imports that point up the layers:\n" + "\n".join(sorted(set(upward)))


def test_no_import_inside_a_function() -> None:
    lazy = [f"{src} imports {dst} inside a function" for src, targets in GRAPH.items() for dst, inner in targets
            if inner and (src, dst) not in LAZY_ALLOWED]
    assert not lazy, "\n".join(sorted(set(lazy)))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node)
    return cycles


def test_no_cycle() -> None:
    # Parent packages are initialised before their members anyway; an edge into a package's own
    # __init__ from a member is the ordinary relative import, not a cycle worth reporting.
    edges = {
        src: {dst for dst, _ in targets if not (dst.endswith(".__init__") and src.startswith(dst[: -len("__init__")]))}
        for src, targets in GRAPH.items()
    }
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# The same graph read as folders: each top-level package or module of lockgate is one node. The
# folders are what a reader sees first, so each holds one layer and their imports point one way too.
def _package(name: str) -> str:
    parts = name.split(".")
    return "lockgate" if len(parts) == 1 or parts[1] == "__init__" else ".".join(parts[:2])


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """Each package's imports of other packages, with the module imports behind each."""
    graph: dict[str, dict[str, list[str]]] = {}
    for src, targets in GRAPH.items():
        for dst, _ in targets:
            if _package(dst) != _package(src):
                graph.setdefault(_package(src), {}).setdefault(_package(dst), []).append(f"{src} -> {dst}")
    return graph


PACKAGE_GRAPH = _package_graph()


def test_every_package_is_one_layer() -> None:
    packages = {_package(n) for n in GRAPH}
    unplaced = sorted(p for p in packages if p not in LAYERS)
    assert not unplaced, f"give these packages a layer in tests/test_layers.py: {unplaced}"
    apart = sorted(f"{n} ({LAYER_NAMES[_layer(n)]}) sits in {_package(n)}/ ({LAYER_NAMES[LAYERS[_package(n)]]})"
                   for n in GRAPH if _layer(n) != LAYERS[_package(n)])
    assert not apart, "modules in a package of another layer: move them to a package of their own\n" + "\n".join(apart)


def test_packages_import_downward() -> None:
    upward = [
        f"{src} ({LAYER_NAMES[_layer(src)]}) imports {dst} ({LAYER_NAMES[_layer(dst)]}): {', '.join(why[:3])}"
        for src, targets in PACKAGE_GRAPH.items()
        for dst, why in targets.items()
        if _layer(dst) > _layer(src)
    ]
    assert not upward, "packages that import up the layers:\n" + "\n".join(sorted(upward))


def test_no_package_cycle() -> None:
    cycles = _cycles({src: set(targets) for src, targets in PACKAGE_GRAPH.items()})
    shown = [" -> ".join(c) + " (" + "; ".join(PACKAGE_GRAPH[a][b][0] for a, b in itertools.pairwise(c)) + ")"
             for c in cycles]
    assert not cycles, "packages that import each other in a circle:\n" + "\n".join(shown)


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_module_is_small(name: str) -> None:
    lines = _modules()[name].read_text().count("\n")
    assert lines <= 650, f"{name} has {lines} lines: split it by responsibility"
