"""experiments/target_loops.py on tiny random targets (CPU, fp32, committed validation
prompts truncated): every looping number is recomputed here from the returned outputs by a
second method (first occurrences of each 4-gram, statistics.stdev), a target paired with
itself differs by exactly 0, and the command writes a stamped results.json and a table.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from experiments.acceptance_stats import LOW_REPETITION
from experiments.target_loops import ZOO_TOKENIZER, main, measure, tokenizer_of, window_repetition

SHAPE = dict(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
             max_position_embeddings=512)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """Two random targets with the zoo tokenizer's vocabulary (no tokenizer of their own)."""
    dirs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        path = tmp_path_factory.mktemp(f"target{seed}")
        Qwen3ForCausalLM(Qwen3Config(**SHAPE)).eval().save_pretrained(path)
        dirs.append(path)
    return dirs


def first_starts(tokens: list[int], n: int = 4) -> list[tuple[int, int]]:
    """(start, start of the first occurrence of the same n-gram) for every n-gram."""
    first = {}
    return [(i, first.setdefault(tuple(tokens[i : i + n]), i))
            for i in range(len(tokens) - n + 1)]


def test_window_repetition_by_hand():
    out = [[1, 2, 3, 4, 1, 2, 3, 4, 5]]  # 4-grams at 0..5; the one at 4 repeats the one at 0
    assert window_repetition(out, 0, 4) == (0.0, 4)
    assert window_repetition(out, 4, 256) == (0.5, 2)
    assert window_repetition(out, 2, 5) == (1 / 3, 3)
    assert math.isnan(window_repetition(out, 6, 9)[0])


def test_looping_numbers_match_a_second_computation(targets):
    a, b = targets
    assert tokenizer_of(a) == ZOO_TOKENIZER
    body, outputs = measure([a, b, a], num_prompts=6, max_new_tokens=72, device="cpu",
                            batch_size=6)
    assert outputs[2] == outputs[0] and all(len(o) == 6 for o in outputs)
    for row, outs in zip(body["rows"], outputs):
        assert row["val_loss"] is None and all(0 < len(t) <= 72 for t in outs)
        pairs = [first_starts(t) for t in outs]
        per = [sum(f < i for i, f in p) / len(p) for p in pairs]
        assert row["per_output"] == pytest.approx(per)
        assert row["repetition"] == pytest.approx(
            sum(f < i for p in pairs for i, f in p) / sum(map(len, pairs)))
        assert row["per_output_mean"] == pytest.approx(statistics.mean(per))
        assert row["per_output_2se"] == pytest.approx(2 * statistics.stdev(per) / math.sqrt(6))
        assert row["low_repetition_frac"] == sum(r < LOW_REPETITION for r in per) / 6
        assert row["mean_length"] == statistics.mean(map(len, outs))
        for w in row["windows"]:
            lo, hi = w["window"]
            hits = [f < i for p in pairs for i, f in p if lo <= i < hi]
            assert (w["grams"], w["repetition"]) == pytest.approx((len(hits),
                                                                   sum(hits) / len(hits)))
    assert body["rows"][0]["repetition"] > 0  # the check above compared non-trivial numbers
    first, other, same = (r["per_output"] for r in body["rows"])
    diffs = [y - x for x, y in zip(first, other)]
    assert body["paired"][0]["diff"] == pytest.approx(statistics.mean(diffs))
    assert body["paired"][0]["diff_2se"] == pytest.approx(2 * statistics.stdev(diffs)
                                                          / math.sqrt(6))
    assert (body["paired"][1]["diff"], body["paired"][1]["diff_2se"]) == (0.0, 0.0)


def test_command_writes_stamped_results(targets, tmp_path):
    a, _ = targets
    (a / "metrics.json").write_text(json.dumps({"val_loss": 2.5}))
    assert main(["--targets", str(a), "--num-prompts", "3", "--max-new-tokens", "12",
                 "--device", "cpu", "--batch-size", "2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert "git_sha" in result and result["args"]["num_prompts"] == 3
    assert result["rows"][0]["val_loss"] == 2.5 and result["paired"] == []
    assert "| 2.500 |" in (tmp_path / "results.md").read_text()
