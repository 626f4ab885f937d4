"""toy/ablations.py on the micro recipe: each ablation trains once, resumes, loads."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from experiments.acceptance import AcceptanceConfig, measure
from reference.loaders import load_target
from reference.methods.eagle import EagleProposer
from reference.methods.variants import FusionProposer
from toy import step_cost
from toy.ablations import ABLATIONS, ablation_config, run_ablations
from toy.recipe import MICRO
from toy.variants import load_variant, variant_of

BASE = dataclasses.replace(MICRO.drafters[0], steps=3)


def test_ablation_configs_differ_from_full_in_one_field():
    full = dataclasses.asdict(ablation_config("full"))
    for name in ABLATIONS:
        diff = {k for k, v in dataclasses.asdict(ablation_config(name)).items()
                if full[k] != v}
        assert diff == set(ABLATIONS[name]), name


def test_the_eagle_step_launches_no_more_kernels_than_a_dflash_step():
    """Equal steps in equal time on a shared GPU, where step time follows the op count."""
    target, batch = step_cost.micro_batch(torch.float32)
    depth = ablation_config("eagle").chain_depth
    eagle, _ = step_cost.measure(step_cost.step_fn(target, batch, "eagle", depth), reps=1)
    dflash, _ = step_cost.measure(step_cost.step_fn(target, batch, "dflash"), reps=1)
    assert eagle <= dflash


def test_step_profile_writes_its_window_only_when_asked(tmp_path):
    x = torch.ones(4, requires_grad=True)

    def loop(name, folder=None):
        prof = step_cost.StepProfile(name, folder, first=1, count=2)
        for i in range(4):
            prof.step(i)
            (x * 2).sum().backward()
        prof.close()

    loop("off (dflash B=16)")
    assert list(tmp_path.iterdir()) == []
    loop("full (dflash B=16)", tmp_path)
    text = (tmp_path / "full_dflash_B_16.txt").read_text()
    assert text.startswith("full_dflash_B_16: steps 1-2, wall ")
    assert "aten::mul" in text


def test_choose_counts_the_compile_time_against_the_budget(tmp_path):
    def run(name, first_wall, rate):  # step 0 logged at first_wall, then `rate` steps/s
        (tmp_path / name).mkdir()
        history = [{"step": 0, "wall_s": first_wall},
                   {"step": 100, "wall_s": first_wall + 100 / rate}]
        (tmp_path / name / "metrics.json").write_text(json.dumps({"history": history}))
        return tmp_path / name

    eager, fast, slow = run("eager", 2.0, 10.0), run("fast", 62.0, 20.0), run("slow", 62.0, 11.0)
    assert step_cost.steps_in(eager, 1.0) == pytest.approx(580.0)
    assert step_cost.steps_in(fast, 8.0) > step_cost.steps_in(eager, 8.0)  # 8360 vs 4780
    assert step_cost.steps_in(slow, 8.0) < step_cost.steps_in(eager, 8.0)  # 4598 vs 4780
    assert step_cost.steps_in(fast, 1.0) == 0.0


def test_ablations_train_resume_and_evaluate(micro):
    out, _ = micro
    names = ("fusion", "eagle")
    records = run_ablations(out, MICRO, names, BASE, command="test")
    assert set(records) == set(names)
    assert run_ablations(out, MICRO, names, BASE) == {}
    deeper = dataclasses.replace(BASE, num_layers=BASE.num_layers + 1)  # --layers
    records = run_ablations(out, MICRO, ("fusion",), deeper, suffix=f"-l{deeper.num_layers}")
    assert records["fusion"]["stage"] == f"ablations/fusion-l{deeper.num_layers}"
    config = json.loads((out / records["fusion"]["stage"] / "config.json").read_text())
    assert config["num_hidden_layers"] == deeper.num_layers
    assert variant_of(out / "ablations" / "eagle") == "eagle"
    target = load_target(out / "target", dtype=torch.float32)
    assert isinstance(load_variant(out / "ablations" / "fusion", target), FusionProposer)
    assert isinstance(load_variant(out / "ablations" / "eagle", target), EagleProposer)
    cfg = AcceptanceConfig(artifacts=str(out), drafters=[f"ablations/{n}" for n in names],
                           splits=["test"], temperatures=[0.0], num_prompts=2,
                           prompts="corpus", prompt_len=[8, 16], max_new_tokens=12, max_files=40)
    rows, _, _ = measure(cfg)
    assert [r["equal_plain"] for r in rows] == [2, 2]
    assert all(r["draft_ms_per_round"] > 0 for r in rows)
