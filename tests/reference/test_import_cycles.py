"""The engine's packages import each other without cycles: every `import` in `reference/`,
`kernels/`, `common/` and `workbench/bench/` (at module level or inside a function, a lazy
import hides a cycle without removing it; type-only imports under `if TYPE_CHECKING:`
aside) is an edge, and the graph has no strongly connected component of two modules or
more. A cycle made by a moved file shows up here before it shows up as an ImportError that
depends on which module happens to be imported first."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("reference", "kernels", "common", "workbench/bench")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for root in ROOTS for p in sorted((REPO / root).rglob("*.py"))}


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports (`from a import b`: a.b when it is a module)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in out if m in known}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more nodes, or with a self edge (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_checker_finds_a_cycle_and_passes_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"c"}}) == [["c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_type_only_imports_are_not_edges(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nimport x.y\nif TYPE_CHECKING:\n"
                   "    import x.z\n\ndef f():\n    from x import w\n")
    assert imports(src, {"x", "x.y", "x.z", "x.w"}) == {"x.y", "x.w"}


def test_the_engine_packages_have_no_import_cycle():
    mods = modules()
    assert "reference.engine" in mods and "workbench.bench.decode" in mods
    graph = {m: imports(p, set(mods)) for m, p in mods.items()}
    assert cycles(graph) == []


def test_the_engine_and_its_bench_import_without_hydra_or_simpy():
    """The GPU machine has neither: the engine and workbench.bench import with both blocked,
    `import workbench` alone loads nothing of the engine, and `python -m workbench.bench`
    runs (its help)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('simpy', 'hydra', 'omegaconf'): sys.modules[m] = None\n"
        "import workbench\n"
        "assert [m for m in sys.modules if m.split('.')[0] in ('reference', 'kernels')] == []\n"
        "import reference, workbench.bench.decode, workbench.bench.phases\n"
        "import workbench.bench.ablate, workbench.bench.report\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    help_run = subprocess.run([sys.executable, "-m", "workbench.bench", "--help"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert help_run.returncode == 0 and "--batch-sizes" in help_run.stdout, help_run.stderr
