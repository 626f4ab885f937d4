"""The methods registry is the simulator's single source of method facts.

Every conf/spec option names a registered method and every registered method has one of its
own name; `spec.method`'s choices are the registry; no simulator module outside
simulator/methods/ compares a method to a name; method modules import only `base` and their
own variant module (no cycles); each method's options are a frozen dataclass; and the checks
that moved into the method classes raise the messages they always did.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.methods import METHODS, SpecMethod, make_method
from simulator.methods.base import MethodOptions
from simulator.params import ConfigError, SimConfig, SpecParams

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "simulator"
PKG = SIM / "methods"


def _spec_options() -> dict[str, str]:
    """conf/spec/<file stem> -> the `method` it sets."""
    return {p.stem: yaml.safe_load(p.read_text())["method"]
            for p in sorted((REPO / "conf" / "spec").glob("*.yaml"))}


def test_every_spec_option_is_a_registered_method_and_back():
    options = _spec_options()
    assert set(options.values()) == set(METHODS)
    assert set(METHODS) <= set(options)  # each method has conf/spec/<its name>.yaml
    assert all(options[name] == name for name in METHODS)
    presets = {stem: m for stem, m in options.items() if stem not in METHODS}
    assert presets == {"dflash_tree": "dflash", "eagle_tree": "eagle"}  # the trees


@pytest.mark.parametrize("name", list(METHODS))
def test_options_are_a_frozen_dataclass_whose_defaults_validate(name):
    cls = METHODS[name].options_class
    assert issubclass(cls, MethodOptions) and cls.__dataclass_params__.frozen
    opts = cls.of({}, name)
    for f in dataclasses.fields(cls):
        assert {"lo", "hi", "choices", "doc"} <= set(f.metadata), (name, f.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(opts, f.name, None)


def test_the_common_fields_are_left_in_spec_params():
    moved = {"target_features", "markov_rank", "verify_policy", "confidence_threshold",
             "confidence_corr", "draft_topk", "tree_tokens", "draft_vocab_size", "tree_budget",
             "tree_top_k", "tree_policy", "tree_budgets"}
    fields = {f.name for f in dataclasses.fields(SpecParams)}
    assert not moved & fields
    owners = {f.name: n for n, m in METHODS.items()
              for f in dataclasses.fields(m.options_class)}
    assert moved == set(owners)


def test_method_choices_come_from_the_registry():
    field = next(f for f in dataclasses.fields(SpecParams) if f.name == "method")
    assert field.metadata["choices"] == tuple(METHODS)
    assert next(iter(METHODS)) == "none"  # the baseline is listed first


@pytest.mark.parametrize("name", list(METHODS))
def test_registered_classes_build_from_their_config(name):
    cls = METHODS[name]
    assert issubclass(cls, SpecMethod) and cls.name == name
    spec = yaml.safe_load((REPO / "conf" / "spec" / f"{name}.yaml").read_text())
    spec.pop("defaults")
    cfg = SimConfig.coerce({"spec": spec})
    assert type(make_method(cfg)) is cls


_COMPARE = re.compile(r"""\.method\s*(==|!=)\s*["']|\.method\s+(not\s+)?in\s*[(\[{]""")


def test_no_module_outside_the_registry_branches_on_a_method_name():
    offenders = []
    for path in sorted(SIM.rglob("*.py")):
        if PKG in path.parents:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _COMPARE.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def _runtime_imports(path: Path) -> list[str]:
    """Modules of simulator/ that `path` imports at run time (not under TYPE_CHECKING)."""
    out, todo = [], list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        todo += list(ast.iter_child_nodes(node))
    return [m for m in out if m.startswith("simulator")]


def test_method_modules_import_base_and_never_the_package_or_each_other():
    """A method's module may import its variant modules (those that register nothing, as
    dflash_tree for dflash); a variant imports base only."""
    modules = {p.stem: p for p in PKG.glob("*.py") if p.stem not in ("__init__", "base")}
    variants = {s for s, p in modules.items() if "@register" not in p.read_text()}
    assert variants == {"dflash_tree", "eagle_tree"}
    for stem, path in modules.items():
        imports = _runtime_imports(path)
        siblings = {m.split(".")[2] for m in imports if m.startswith("simulator.methods.")}
        assert siblings <= {"base"} | (set() if stem in variants else variants), (stem, siblings)
        assert "simulator.methods" not in imports, stem


def test_the_registry_loads_without_its_importers():
    """No cycle: importing the package loads no simulator module that imports it."""
    importers = sorted(
        "simulator." + p.stem for p in SIM.glob("*.py")
        if any(m.startswith("simulator.methods") for m in _runtime_imports(p)))
    assert "simulator.params" in importers
    code = ("import sys, simulator.methods\n"
            f"loaded = [m for m in {importers!r} if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("spec,message", [
    ({"method": "none", "block_size": 4}, "spec.block_size = 4 must be 1 when spec.method = none"),
    ({"method": "dspark", "block_size": 1},
     r"spec.block_size = 1 is outside \[2, 256\] for dspark \(gamma \+ 1\)"),
    ({"method": "dspark", "acceptance": "replay", "replay_path": "x.json"},
     "spec.acceptance = replay must be preset or constant for dspark"),
    ({"method": "dflash", "draft_layers": 0},
     r"spec.draft_layers = 0 is outside \[1, 1024\] for dflash"),
    ({"method": "eagle", "block_size": 8, "draft_layers": 0},
     r"spec.draft_layers = 0 is outside \[1, 1024\] for eagle"),
])
def test_method_checks_raise_their_messages(spec, message):
    with pytest.raises(ConfigError, match=message):
        SimConfig.coerce({"spec": spec})
