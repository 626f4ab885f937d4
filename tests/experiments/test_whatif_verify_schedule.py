"""experiments.whatifs.verify_schedule at tiny scale: the throughput cliff when the batch
crosses a threshold of the schedule, which the load-aware budget does not have."""

from __future__ import annotations

import pytest

from common.batch_schedule import parse_schedule
from experiments.whatifs.base import base_config, vary
from experiments.whatifs.verify_schedule import EXPERIMENT, cliffs, sweep
from simulator.methods import METHODS
from simulator.methods.dspark import DSparkOptions
from simulator.params import ConfigError


def test_vary_sets_a_methods_option_and_a_new_method_starts_from_its_defaults():
    cfg = base_config(EXPERIMENT)
    assert cfg.spec.method == "dflash" and cfg.spec.options  # DFlash's options composed
    ds = vary(cfg, {"spec.method": "dspark", "spec.verify_schedule": None,
                    "spec.options.verify_policy": "static"})
    assert ds.spec.options == {"verify_policy": "static"}
    assert METHODS["dspark"].options(ds.spec) == DSparkOptions(verify_policy="static")
    with pytest.raises(ConfigError, match=r"spec.options.markov_rank = 0 is outside \[1, "):
        vary(ds, {"spec.options.markov_rank": 0})


def test_cliff_at_the_first_threshold():
    rows = sweep(
        (8, 9), ("schedule", "DSpark budget, AUC 0.80"), per_client=4, min_requests=48, jobs=1
    )
    by = {(r["series"], r["concurrency"]): r for r in rows}
    assert by["schedule", 8]["verify_per_round"] > 7.5  # K = 7: 8 tokens per request
    assert by["schedule", 9]["verify_per_round"] < 4.5  # K = 3 for most rounds
    assert by["schedule", 9]["output_tok_s"] < 0.85 * by["schedule", 8]["output_tok_s"]
    assert by["DSpark budget, AUC 0.80", 9]["output_tok_s"] > by["schedule", 9]["output_tok_s"]
    (cliff,) = cliffs(rows, parse_schedule([[1, 8, 7], [9, 32, 3], [33, 1024, 0]]))
    assert cliff["threshold"] == 9 and cliff["drop"] > 0.15
