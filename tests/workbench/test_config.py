"""Hydra configs: every option of every group composes and validates; bad values fail
before any run with a message naming the key and the allowed range."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import simulator
from simulator.methods import METHODS
from simulator.params import ConfigError
from workbench.config import SimulateConfig, load, register_configs

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "hardware", "spec", "engine", "workload", "experiment")


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=list(overrides))


def _options():
    for group in GROUPS:
        for path in sorted((CONF / group).glob("*.yaml")):
            yield group, path.stem


def test_every_group_has_its_options():
    names = {g: {o for gg, o in _options() if gg == g} for g in GROUPS}
    assert {"qwen3-8b", "qwen3-4b", "llama-3.1-8b", "toy"} <= names["model"]
    assert {"h200", "h100", "b200"} <= names["hardware"]
    assert {"none", "eagle", "dflash"} <= names["spec"]
    assert {"sync", "overlap"} <= names["engine"]
    assert {"gsm8k", "humaneval", "math500", "mtbench", "poisson", "closed_loop"} <= (
        names["workload"])


def _needs_joblib(group: str, option: str) -> bool:
    return group == "experiment" and "hydra/launcher: joblib" in (
        CONF / group / f"{option}.yaml").read_text()


@pytest.mark.parametrize("group,option", list(_options()))
def test_option_composes_validates_and_runs(group, option):
    if _needs_joblib(group, option):
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher")  # the `sweep` extra
    app = load(_compose(f"{group}={option}"))
    assert isinstance(app, SimulateConfig)
    small = dataclasses.replace(app, workload=dataclasses.replace(
        app.workload, num_requests=8, duration_s=None, concurrency=4))
    result = simulator.run(small)
    assert result.summary["requests"]["finished"] == 8


def test_schema_defaults_are_the_default_config():
    """The schemas' defaults, the default method's options dataclass's among them, are the
    composed default config (whose spec lists every option of that method)."""
    composed, schema = load(_compose()), SimulateConfig()
    method = METHODS[schema.spec.method]
    assert method.options(composed.spec) == method.options(schema.spec)
    assert set(composed.spec.options) == {f.name for f in dataclasses.fields(method.options_class)}
    composed.spec.options = schema.spec.options
    assert composed == schema


@pytest.mark.parametrize("option", [o for g, o in _options() if g == "spec"])
def test_every_spec_option_lists_its_methods_options(option):
    """So that `spec.options.<name>=value` overrides each without a `+`."""
    spec = load(_compose(f"spec={option}")).spec
    fields = {f.name for f in dataclasses.fields(METHODS[spec.method].options_class)}
    assert set(spec.options) == fields


def test_datasheet_hardware_is_marked():
    assert load(_compose("hardware=h200")).hardware.source == "measured"
    for hw in ("h100", "b200"):
        assert load(_compose(f"hardware={hw}")).hardware.source == "datasheet"


@pytest.mark.parametrize("override,message", [
    (["workload.rate_rps=-1"], r"workload.rate_rps = -1.0 is outside \[1e-09, "),
    (["engine.max_running_requests=0"], r"engine.max_running_requests = 0 is outside \[1, "),
    (["engine.mem_fraction_static=1.5"], r"engine.mem_fraction_static = 1.5 is outside"),
    (["spec.method=medusa"], r"spec.method = 'medusa' is not one of \['none', "),
    (["spec.block_size=0"], r"spec.block_size = 0 is outside \[1, 256\]"),
    (["spec.alpha=1.2", "spec.acceptance=constant"], r"spec.alpha = 1.2 is outside \[0.0, 1.0\]"),
    (["sweep.concurrency=[4,0]"], r"sweep.concurrency\[1\] = 0 is outside"),
    (["model.num_kv_heads=5"], r"model.num_kv_heads = 5 must divide model.num_heads = 32"),
    (["spec=none", "spec.block_size=4"], r"spec.block_size = 4 must be 1"),
    (["engine.kv_reserve_blocks=1"], r"engine.kv_reserve_blocks = 1 is outside \[2, 64\]"),
    (["workload.arrival=trace"], r"workload.trace_path must be set"),
    (["cluster.router=random"], r"cluster.router = 'random' is not one of"),
])
def test_bad_values_name_the_key_and_range(override, message):
    cfg = _compose(*override)
    with pytest.raises(ConfigError, match=message):
        load(cfg)


@pytest.mark.parametrize("override", ["workload.bogus=1", "workload.num_requests=many",
                                      "model.tie_embeddings=maybe"])
def test_unknown_keys_and_wrong_types_fail_at_compose(override):
    with pytest.raises(Exception, match="bogus|many|maybe"):
        _compose(override)


def test_help_lists_every_field_with_its_value_range_and_description():
    import os
    import subprocess
    import sys

    repo = CONF.parent
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "spec=eagle_tree", "spec.block_size=6",
         "--help"], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, out.stderr
    text = out.stdout
    flat = " ".join(text.split())  # descriptions wrapped over lines, read as one
    for line in ("  model.num_experts = 0  [0, 65536]  MoE: routed experts per layer; 0: dense MLP",
                 "  spec.method = eagle  one of none, dflash,",
                 "  spec.block_size = 6  [1, 256]  B: tokens verified per request per round",
                 "  spec.options.draft_topk = 10  [1, 1024]  tree: candidates per request",
                 "  engine.mode = overlap  one of sync, overlap",
                 "  sweep.baseline = true  also run spec.method=none at every point",
                 "  seed = 0  [0, 9223372036854775807]",
                 "spec: base_spec, dflash, dflash_tree, dspark, eagle, eagle_tree,"):
        assert line in text, line
    assert "spec.options.tree_budget" not in text  # dflash's option, not eagle's
    schema = SimulateConfig()
    for section in dataclasses.fields(schema):
        value = getattr(schema, section.name)
        fields = dataclasses.fields(value) if dataclasses.is_dataclass(value) else [section]
        for f in fields:
            if f.name == "options":
                continue
            key = f.name if f is section else f"{section.name}.{f.name}"
            assert f"\n  {key} = " in text, key
            assert " ".join(f.metadata["doc"].split()) in flat, key
