"""The package's shape (docs/architecture.md): imports point down the layers, no import cycle
(imports made inside functions count; those under TYPE_CHECKING do not), no source file over
800 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.paths import PROJECT_ROOT

PACKAGE: Final = PROJECT_ROOT / "src" / "perfledger"
MAX_LINES: Final = 800
# The layers, bottom first: a module may import its own layer and the ones below.
LAYERS: Final = (
    ("perfledger.errors", "perfledger.direct_files", "perfledger.duck", "perfledger.files",
     "perfledger.heap", "perfledger.interrupts",
     "perfledger.import_pool",
     "perfledger.memory", "perfledger.orphans", "perfledger.pages", "perfledger.version",
     "perfledger.vcs"),
    ("perfledger.model",),
    ("perfledger.sources",),
    ("perfledger.analysis",),
    ("perfledger.render",),
    ("perfledger.profiledir",),
    ("perfledger.ledger",),
    ("perfledger.run",),
    ("perfledger.record",),
    ("perfledger.cli",),
    ("perfledger.__main__",),
)  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Final = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    """The layer of a module; the package itself (its lazy public API) sits on top."""
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    if module == "perfledger":
        return len(LAYERS)
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and the docs")


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for n in ast.walk(node)}
    return skipped


def imports_of(module: str) -> Iterator[str]:
    """The perfledger modules ``module`` imports, at any depth of its code."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target.startswith("perfledger") and target != module:
                yield target


GRAPH: Final = {module: sorted(set(imports_of(module))) for module in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module: str) -> None:
    upward = [t for t in GRAPH[module] if layer(t) > layer(module)]
    assert not upward, f"{module} (layer {layer(module)}) imports a layer above: {upward}"


def test_no_import_cycle() -> None:
    # Tarjan's strongly connected components: any with more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_no_source_file_over_800_lines() -> None:
    sources = [
        p
        for p in PACKAGE.rglob("*")
        if p.suffix in (".py", ".js", ".css", ".j2") and not p.name.endswith(".min.js")
    ]
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"source files over {MAX_LINES} lines: {long}"


def test_the_layer_check_sees_function_level_imports() -> None:
    """The graph counts imports made inside functions (the record launcher builds profiles
    lazily): without them a cycle could hide."""
    assert "perfledger.run.pipeline" in GRAPH["perfledger.record.launcher"]
