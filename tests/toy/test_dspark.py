"""DSpark toy training at micro scale: the loss falls, the checkpoint loads and decodes
greedily like the target, and the study command writes every result file."""

from __future__ import annotations

import json
import sys

import torch

from reference.generate import generate
from reference.loaders import load_target
from reference.methods.dspark_proposer import load_dspark
from toy import dspark_study
from toy.gen_data import load_dataset
from toy.tokenizer import MASK, load_tokenizer
from toy.train_dspark import DSparkTrainConfig, train_dspark


def test_loss_falls_and_checkpoint_decodes(micro, tmp_path):
    out, _ = micro
    target = load_target(out / "target")
    mask = load_tokenizer(out / "tokenizer" / "tokenizer.json").token_to_id(MASK)
    cfg = DSparkTrainConfig(
        gamma=7, markov_rank=16, num_layers=1, num_anchors=8, batch=6, steps=25, lr=3e-3
    )
    metrics = train_dspark(
        target, load_dataset(out / "data" / "train.safetensors"), tmp_path / "dspark", cfg, mask
    )
    assert metrics["loss_last"] < 0.7 * metrics["loss_first"]
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    plain = generate(target, prompts, max_new_tokens=12)
    spec = generate(
        target, prompts, proposer=load_dspark(tmp_path / "dspark", target), max_new_tokens=12
    )
    assert spec.tokens == plain.tokens


def test_study_writes_every_result(micro, tmp_path, monkeypatch):
    out, _ = micro
    dest = tmp_path / "study"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "dspark_study",
            "--artifacts",
            str(out),
            "--out",
            str(dest),
            "--prompts",
            "3",
            "--prompts-from",
            "corpus",
            "--max-new",
            "12",
            "--markov-rank",
            "8",
            "--retrain-dflash",
            "always",
        ],
    )
    torch.manual_seed(0)
    dspark_study.main()
    for name in (
        "results.json",
        "tau_per_position.csv",
        "calibration.csv",
        "reliability.png",
        "survival.png",
        "report.md",
        "dspark/calibration.json",
        "dflash-equal/model.safetensors",
    ):
        assert (dest / name).is_file(), name
    results = json.loads((dest / "results.json").read_text())
    assert {r["drafter"] for r in results["decode"]} == {"dspark", "dflash-b16", "dflash-equal"}
    assert (
        results["training"]["dspark"]["steps_done"]
        == results["training"]["dflash_b16"]["steps_done"]
    )
    assert len(results["calibration"]["ece_after"]) == 15
