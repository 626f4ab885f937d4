"""The one table of method names (common/methods.py) against both registries, the one home
of LinearSpec's tiers, and no branch on a method name outside the registries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from common.methods import NAMES, TIERS

REPO = Path(__file__).resolve().parents[2]


def test_the_table_lists_the_reference_registry():
    reference_methods = pytest.importorskip("reference.methods")
    assert sorted(n for n, m in NAMES.items() if m.reference) == reference_methods.names()


def test_the_table_lists_the_simulator_registry():
    from simulator.methods import METHODS

    assert {n for n, m in NAMES.items() if m.simulator} == set(METHODS)


def test_the_layers_share_every_simulator_name():
    """Every method the simulator models is one the reference runs, under the same name."""
    assert all(m.reference for m in NAMES.values() if m.simulator)


def test_every_method_has_its_own_colour():
    colours = [m.colour for m in NAMES.values()]
    assert len(set(colours)) == len(colours)
    assert all(name == m.name for name, m in NAMES.items())


def test_tiers_have_one_home():
    pytest.importorskip("torch")
    from reference.methods.linearspec import TIERS as reference_tiers
    from simulator.methods.linearspec import LinearSpec

    assert reference_tiers is TIERS and LinearSpec().tiers is TIERS
    assert [m for m, _ in TIERS] == sorted(m for m, _ in TIERS)


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _method_branches(path: Path) -> list[str]:
    """Comparisons of a `method` value (a name, attribute or subscript holding "method")
    with a method name of the table, in `path`."""
    text, out = path.read_text(), []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = [s for side in sides for s in _strings(side) if s in NAMES]
        if named and "method" in ast.get_source_segment(text, node):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {named}")
    return out


# committed result rows of one method's runs that a reproduced claim reads (data, not logic)
DATA_QUERIES = {"workbench/reproduce/data.py"}


def test_no_driver_branches_on_a_method_name():
    """workbench/ and simulator/ (outside the registry) ask a method, never its name."""
    paths = sorted([*(REPO / "workbench").rglob("*.py"), *(REPO / "simulator").rglob("*.py")])
    offenders = [hit for p in paths if "methods" not in p.relative_to(REPO).parts
                 and str(p.relative_to(REPO)) not in DATA_QUERIES
                 for hit in _method_branches(p)]
    assert not offenders, "\n".join(offenders)
