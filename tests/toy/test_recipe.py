"""The whole toy recipe at micro scale on the CPU, end to end.

tokenizer -> micro target (a few steps) -> the target's greedy continuations -> DFlash
drafters (B = 16 and 8, a few steps; the loss must fall) -> load_dflash -> speculative
generate equals plain greedy token for token (lossless whatever the drafter's quality), with
tau >= 1. Then: a rerun skips every stage, a changed parameter invalidates exactly the
stages from it on, and the zoo manifest pins every file by sha256.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from reference.generate import generate
from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from toy import stages
from toy.gen_data import load_dataset, split_prompts
from toy.recipe import (
    MICRO,
    STAGES,
    Recipe,
    is_done,
    parser,
    recipe_for,
    recipe_from_args,
    run_recipe,
    stage_key,
)
from toy.tokenizer import EOT, load_tokenizer
from toy.zoo import export_zoo, verify_zoo

ROOT = Path(__file__).resolve().parents[2]


def test_every_stage_ran_and_the_drafter_losses_fell(micro):
    out, records = micro
    assert list(records) == list(STAGES)
    for stage in ("dflash-b16", "dflash-b8"):
        m = records[stage]["metrics"]
        assert m["loss_last"] < m["loss_first"], (stage, m)
    assert records["target"]["metrics"]["train_loss_last"] < \
        records["target"]["metrics"]["train_loss_first"]


def test_data_holds_the_targets_own_greedy_continuations(micro):
    out, _ = micro
    data = load_dataset(out / "data" / "train.safetensors")
    assert len(data) == MICRO.num_prompts
    ids, loss_mask, lens = data.batch([0, 1])
    plen = int(data.prompt_lens[0])
    assert not loss_mask[0, :plen].any() and loss_mask[0, plen : int(lens[0])].all()
    assert not loss_mask[0, int(lens[0]):].any()
    target = load_target(out / "target", dtype=torch.float32)
    eot = load_tokenizer(out / "tokenizer" / "tokenizer.json").token_to_id(EOT)
    again = generate(target, [ids[0, :plen].tolist()], max_new_tokens=MICRO.max_new,
                     stop_token_ids=(eot,))
    assert again.tokens[0] == ids[0, plen : int(lens[0])].tolist()


def test_trained_drafters_are_lossless_with_tau_at_least_one(micro):
    out, records = micro
    tok = load_tokenizer(out / "tokenizer" / "tokenizer.json")
    target = load_target(out / "target", dtype=torch.float32)
    prompts = split_prompts(tok, "test", 3, MICRO.prompt_len, seed=7, max_files=MICRO.max_files)
    plain = generate(target, prompts, max_new_tokens=20)
    for stage, block in (("dflash-b16", 16), ("dflash-b8", 8)):
        proposer = load_dflash(out / stage, target)
        assert proposer.block_size == block
        spec = generate(target, prompts, proposer=proposer, max_new_tokens=20)
        assert spec.tokens == plain.tokens
        assert spec.stats["tau"] >= 1.0
        ev = records["eval"]["metrics"][stage]
        assert ev["match_plain"] == MICRO.eval_prompts and 1.0 <= ev["tau"] <= block


def test_rerun_skips_and_a_change_invalidates_downstream(micro):
    out, _ = micro
    assert run_recipe(out, MICRO) == {}
    b8 = dataclasses.replace(MICRO.drafters[1], steps=MICRO.drafters[1].steps + 1)
    changed = dataclasses.replace(MICRO, drafters=(MICRO.drafters[0], b8))
    assert [is_done(out, changed, s) for s in STAGES] == [True] * 4 + [False, False]
    with pytest.raises(RuntimeError, match="needs"):
        run_recipe(out, changed, only="eval")
    assert run_recipe(out, changed, budget_minutes=1.0) == {}  # b8 (~1 min) does not fit
    assert not is_done(out, changed, "dflash-b8")


def test_target_dropout_keys_the_target_only_when_set(micro):
    """An unset target_dropout leaves every stage key as before (the zoo's stay valid); a
    set one invalidates the target and everything after it, not the tokenizer."""
    out, _ = micro
    zoo = json.loads((ROOT / "experiments" / "zoo" / "manifest.json").read_text())["stages"]
    for stage, record in zoo.items():
        assert record["key"] == stage_key(Recipe(), stage), stage
    dropped = dataclasses.replace(MICRO, target_dropout=0.1)
    assert [is_done(out, dropped, s) for s in STAGES] == [True] + [False] * 5


def test_target_max_repetition_keys_the_target_only_when_set(micro):
    """Unset, every key is the zoo's; set, the tokenizer key is still the zoo's (a copied zoo
    tokenizer counts as done) and the target and everything after it rerun."""
    out, _ = micro
    zoo = json.loads((ROOT / "experiments" / "zoo" / "manifest.json").read_text())["stages"]
    dedup = dataclasses.replace(Recipe(), target_max_repetition=0.6)
    assert stage_key(dedup, "tokenizer") == zoo["tokenizer"]["key"]
    assert all(stage_key(dedup, s) != zoo[s]["key"] for s in STAGES[1:] if s in zoo)
    filtered = dataclasses.replace(MICRO, target_max_repetition=0.6)
    assert [is_done(out, filtered, s) for s in STAGES] == [True] + [False] * 5


def test_target_max_repetition_flag_reaches_the_target_stage(tmp_path, monkeypatch):
    """--target-max-repetition sets the recipe field, is repeated in the arguments of the
    --parallel subprocesses, and stages.target hands it to train_target."""
    recipe, shared = recipe_from_args(parser().parse_args(
        ["--out", "x", "--target-max-repetition", "0.6"]))
    assert recipe == dataclasses.replace(Recipe(), target_max_repetition=0.6)
    again, _ = recipe_from_args(parser().parse_args(["--out", "x", "--stage", "target",
                                                     *shared]))
    assert again == recipe
    assert recipe_from_args(parser().parse_args(["--out", "x"])) == \
        (Recipe(), ["--size", "small"])
    calls = []
    monkeypatch.setattr(stages, "train_target", lambda *a, **kw: calls.append(kw) or {})
    stages.target(tmp_path, recipe, tmp_path / "tokenizer.json", "cpu")
    stages.target(tmp_path, Recipe(), tmp_path / "tokenizer.json", "cpu")
    assert [kw["max_repetition"] for kw in calls] == [0.6, None]


def test_base_recipe_trains_the_measured_target():
    """`--size base` defaults to the dropout that won the committed sweep: its target stage
    key is the one of the committed run, so the same command reproduces that target; small keeps
    the zoo's keys, and an explicit dropout wins over the default."""
    run = json.loads((ROOT / "benchmarks" / "toy" / "2026-11-29-base-pair-dropout" / "base" /
                      "target_stage.json").read_text())
    assert run["metrics"]["dropout"] == recipe_for("base").target_dropout == 0.3
    assert stage_key(recipe_for("base"), "target") == run["key"]
    assert recipe_for("small") == Recipe()
    assert recipe_for("base", target_dropout=0.0).target_dropout == 0.0
    assert recipe_for("base", micro=True) == MICRO


def test_zoo_manifest_pins_every_file(micro, tmp_path):
    out, _ = micro
    manifest = export_zoo(out, tmp_path / "zoo", max_bytes=200 * 2**20)
    assert "target/model.safetensors" in manifest["files"]
    assert manifest["stages"]["dflash-b16"]["command"] == "test"
    assert manifest["stages"]["target"]["seed"] == MICRO.seed
    assert verify_zoo(tmp_path / "zoo") == []
    (tmp_path / "zoo" / "dflash-b8" / "config.json").write_text("{}")
    assert verify_zoo(tmp_path / "zoo") == ["dflash-b8/config.json"]
    with pytest.raises(ValueError, match="cap"):
        export_zoo(out, tmp_path / "zoo2", max_bytes=1000)
