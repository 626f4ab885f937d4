"""The import graph of the project's packages: no cycles (imports inside functions included),
and dependencies that run one way (docs/architecture.md, "Top-level layout"); no package imports
`tests` or the probe code kept under `benchmarks/`.

The graph is read from the source (ast), so an import hidden inside a function counts as
much as one at the top; imports under `if TYPE_CHECKING:` never run and do not count.
`from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("common", "kernels", "reference", "simulator", "workbench", "toy", "experiments")
# package -> project packages it must not import (directly or through a function)
FORBIDDEN = {
    "common": {"kernels", "reference", "simulator", "workbench", "toy", "experiments"},
    "kernels": {"reference", "simulator", "workbench", "toy", "experiments"},
    "reference": {"simulator", "workbench", "toy", "experiments"},
    "simulator": {"kernels", "reference", "workbench", "toy", "experiments"},
    "toy": {"workbench", "experiments", "simulator"},
    "workbench": {"experiments"},
}
# package -> third-party modules it must never import (the GPU machine and the light install)
FORBIDDEN_EXTERNAL = {
    "common": {"torch", "triton", "simpy", "hydra", "omegaconf"},
    "kernels": {"simpy", "hydra", "omegaconf"},
    "reference": {"simpy", "hydra", "omegaconf"},
    "simulator": {"torch", "triton"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module `name` imports: project modules by name, others by top-level package."""
    is_pkg = path.name == "__init__.py"
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_pkg]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m if m in modules else m.split(".")[0] for m in found if m}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or with a self-loop."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan, iterative enough for a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_dependencies_run_one_way():
    bad = []
    for name, deps in _graph().items():
        pkg = name.split(".")[0]
        for dep in deps:
            top = dep.split(".")[0]
            if top in FORBIDDEN.get(pkg, ()) or top in FORBIDDEN_EXTERNAL.get(pkg, ()):
                bad.append(f"{name} -> {dep}")
            if top in ("tests", "benchmarks"):
                bad.append(f"{name} -> {dep}")
    assert bad == []


def test_the_checker_sees_a_cycle_and_a_function_local_import(tmp_path):
    """The reader itself: an import inside a function is an edge, and a 2-cycle is found."""
    a = tmp_path / "a.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\n"
                 "def f():\n    from pkg import b\n")
    modules = {"pkg.a": a, "pkg.b": tmp_path / "b.py", "pkg.c": tmp_path / "c.py"}
    assert _imports("pkg.a", a, modules) == {"pkg.b", "typing"}
    assert _cycles({"x": {"y"}, "y": {"x"}, "z": {"x"}}) == [["x", "y"]]
