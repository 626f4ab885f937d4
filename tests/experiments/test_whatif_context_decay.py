"""experiments.whatifs.context_decay at tiny scale: the base drafter's fit decays, its
yaml carries the fitted values, and decay lowers the decode speedup at 32K tokens."""

from __future__ import annotations

import pytest

from experiments.whatifs.base import base_config
from experiments.whatifs.context_decay import EXPERIMENT, fits, sweep


def test_table4_fits_and_the_yaml_carries_the_base_fit():
    f = fits(None)
    assert f["base"].beta > f["long"].beta > 0
    assert 2048 < f["base"].knee_tokens < 8192  # about the base drafter's 4K training length
    assert f["base"].rms_tau < 0.25
    spec = base_config(EXPERIMENT).spec
    assert spec.context_decay == pytest.approx(f["base"].beta, abs=0.005)
    assert spec.context_knee_tokens == pytest.approx(f["base"].knee_tokens, rel=1e-3)


def test_decay_costs_decode_speedup_at_long_prompts():
    f = fits(None)["base"]
    rows = sweep(
        {"no decay": (0.0, 1.0), "base fit": (f.beta, f.knee_tokens)},
        prompts=(1024, 32768),
        concurrency=(1,),
        per_client=4,
        min_requests=4,
        jobs=1,
    )
    sp = {(r["decay"], r["prompt_tokens"]): r for r in rows}
    assert sp["base fit", 32768]["tau"] < sp["base fit", 1024]["tau"] - 2.0
    assert sp["base fit", 32768]["tpot_speedup"] < sp["no decay", 32768]["tpot_speedup"]
    assert sp["base fit", 32768]["tpot_speedup"] < sp["base fit", 1024]["tpot_speedup"]
