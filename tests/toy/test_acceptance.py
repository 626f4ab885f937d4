"""experiments/acceptance.py, acceptance_stats.py and acceptance_compare.py: the statistics,
and the app on the micro recipe's artifacts."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.acceptance import (
    AcceptanceConfig,
    config_without_hydra,
    decode_in_batches,
    markdown_table,
    run,
)
from experiments.acceptance_compare import compare, markdown
from experiments.acceptance_stats import (
    acceptance_curves,
    paired_difference,
    repetition_rate,
    tau_standard_error,
)

ROOT = Path(__file__).resolve().parents[2]


def _requests_csv(folder: Path, runs: list[tuple], repetition: float = 0.5) -> Path:
    """A run folder whose requests.csv holds (prompt_len, committed, rounds[, repetition])
    per request."""
    folder.mkdir()
    with (folder / "requests.csv").open("w") as f:
        f.write("drafter,train_B,test_B,split,T,request,prompt_len,rounds,committed,"
                "repetition\n")
        for i, (plen, x, n, *rep) in enumerate(runs):
            f.write(f"dflash-b16,16,16,test,0.0,{i},{plen},{n},{x},"
                    f"{rep[0] if rep else repetition}\n")
    return folder


def test_curves_from_commit_lengths():
    c = acceptance_curves([[1, 4, 2], [4]], block_size=4)
    assert c["tau"] == pytest.approx(11 / 4) and c["rounds"] == 4
    assert c["hist"] == [0.25, 0.25, 0.0, 0.5]
    assert c["survival"] == [1.0, 0.75, 0.5, 0.5]
    assert c["alpha"] == pytest.approx([0.75, 2 / 3, 1.0])
    assert sum(c["survival"]) == pytest.approx(c["tau"])  # tau = sum_k S(k)


def test_tau_standard_error_analytic():
    # tau = 8 / 4 = 2; residuals x_i - tau n_i = -2, +2; sqrt(2 / 1 * 8) / 4 = 1
    assert tau_standard_error([[1, 1], [3, 3]]) == pytest.approx(1.0)
    assert tau_standard_error([[2, 3], [3, 2], [1, 4]]) == 0.0  # every request at tau
    assert tau_standard_error([[5, 1, 2]]) == 0.0 and tau_standard_error([]) == 0.0
    assert acceptance_curves([[1, 1], [3, 3]], block_size=4)["tau_se"] == pytest.approx(1.0)


def test_tau_standard_error_matches_the_spread_of_tau():
    """Requests with their own acceptance rate and length: the estimated standard error
    agrees with the spread of tau over 2,000 independent batches of 32 requests."""
    rng = np.random.default_rng(0)

    def batch():
        alpha = rng.uniform(0.3, 0.9, size=32)
        rounds = rng.integers(5, 60, size=32)
        return [list(np.minimum(rng.geometric(1 - a, size=n), 16)) for a, n in zip(alpha, rounds)]

    batches = [batch() for _ in range(2000)]
    taus = [sum(map(sum, b)) / sum(map(len, b)) for b in batches]
    se = np.mean([tau_standard_error(b) for b in batches])
    assert se == pytest.approx(np.std(taus), rel=0.1)


def test_paired_difference_analytic():
    # tau_A = 8 / 4 = 2 with residuals -0.5, +0.5; tau_B = 1 with none: var = 2 * 0.5 = 1
    assert paired_difference([(2, 2), (6, 2)], [(2, 2), (2, 2)]) == pytest.approx((2, 1, 1))
    # B = A + one token on every round: a constant shift the pairing sees without noise
    a = [(3, 2), (12, 4), (5, 5)]
    b = [(x + n, n) for x, n in a]
    tau_a, tau_b, se = paired_difference(a, b)
    assert tau_b - tau_a == pytest.approx(1.0) and se == pytest.approx(0.0, abs=1e-12)
    assert tau_standard_error([[1] * 2 + [2], [4] * 4, [1] * 5]) > 0.5  # each alone is noisy


def test_compare_pairs_two_runs_and_refuses_other_prompts(tmp_path):
    a = _requests_csv(tmp_path / "a", [(64, 8, 2), (80, 2, 2)])
    b = _requests_csv(tmp_path / "b", [(64, 4, 2), (80, 2, 2)])
    (row,) = compare(a, b)
    assert (row["tau_A"], row["tau_B"], row["diff"]) == pytest.approx((2.5, 1.5, 1.0))
    # residuals A: +-3/4, B: +-1/4; their differences +-1/2: se = sqrt(2 * 2 / 4) = 1
    assert row["two_se"] == pytest.approx(2 * math.sqrt(2 * 2 * 0.5 ** 2))
    assert "| dflash-b16 | 16 | test | 0.0 | all | 2 | 2.500 | 1.500 | +1.000 |" in markdown(
        [row], a, b)
    c = _requests_csv(tmp_path / "c", [(64, 8, 2), (99, 2, 2)])
    with pytest.raises(SystemExit, match="other prompts"):
        compare(a, c)
    with pytest.raises(SystemExit, match="no run folder"):
        compare(a, tmp_path / "missing")
    res = subprocess.run([sys.executable, "-m", "experiments.acceptance_compare", str(a),
                          str(b), "--out", str(tmp_path / "compare.md")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "| within noise |" in (tmp_path / "compare.md").read_text()
    assert (tmp_path / "compare.png").stat().st_size > 1000


def test_compare_by_repetition_stratum(tmp_path):
    """Requests split by the larger of the two outputs' repetition: each stratum is the
    paired comparison of its own requests; a stratum of fewer than 2 is left out."""
    a = _requests_csv(tmp_path / "a", [(9, 8, 2, 0.1), (9, 6, 2, 0.2), (9, 4, 2, 0.0),
                                       (9, 9, 3, 0.9), (9, 3, 3, 0.8)])
    b = _requests_csv(tmp_path / "b", [(9, 4, 2, 0.1), (9, 2, 2, 0.6), (9, 4, 2, 0.1),
                                       (9, 3, 3, 0.5), (9, 6, 3, 0.9)])
    rows = {r["stratum"]: r for r in compare(a, b, strata=(0.3, 0.7))}
    assert set(rows) == {"all", "[0, 0.3)", "[0.7, 1]"}  # [0.3, 0.7) holds request 1 only
    low = compare(a, b, strata=(0.5,))
    by = {r["stratum"]: r for r in low}
    assert by["[0, 0.5)"]["requests"] == 2 and by["[0.5, 1]"]["requests"] == 3
    assert (by["[0, 0.5)"]["tau_A"], by["[0, 0.5)"]["tau_B"]) == pytest.approx((3.0, 2.0))
    assert (by["[0.5, 1]"]["tau_A"], by["[0.5, 1]"]["tau_B"]) == pytest.approx((18 / 8,
                                                                               11 / 8))
    assert by["all"] == compare(a, b)[0]


def test_repetition_rate():
    assert repetition_rate([[1, 2, 3, 4, 5]], n=2) == 0.0
    assert repetition_rate([[7, 7, 7, 7, 7]], n=2) == pytest.approx(3 / 4)
    assert repetition_rate([[1]], n=4) == 0.0


def test_app_on_micro_artifacts(micro, tmp_path):
    out, _ = micro
    cfg = AcceptanceConfig(artifacts=str(out), block_sizes=[4, 16], splits=["test"],
                           temperatures=[0.0, 1.0], num_prompts=3, batch_size=2,
                           prompts="corpus", prompt_len=[8, 24], max_new_tokens=16,
                           max_files=40)
    rows = run(cfg, tmp_path)
    assert len(rows) == 2 * 2 * 2  # T x drafters x test B
    for r in rows:
        assert r["batch"] == 2
        assert 1.0 <= r["tau"] <= r["test_B"]
        if r["T"] == 0.0:
            assert r["equal_plain"] == r["prompts"]
    curves = list(csv.DictReader((tmp_path / "curves.csv").open()))
    assert len(curves) == 2 * 2 * (4 + 16)
    for name in ("results.csv", "results.md", "survival.png", "commit_hist.png",
                 "config_resolved.yaml"):
        assert (tmp_path / name).is_file(), name
    assert markdown_table(rows).count("\n") == len(rows) + 2
    assert (tmp_path / "results.md").read_text().startswith("## Headline")
    requests = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert len(requests) == len(rows) * 3
    for q in requests:  # 16 new tokens: every round starts in [0, 64)
        assert (int(q["rounds_pos0_64"]), int(q["committed_pos0_64"]),
                int(q["rounds_pos64_256"])) == (int(q["rounds"]), int(q["committed"]), 0)
    for r in rows:
        assert r["rounds_pos0_64"] == r["rounds"] and r["tau_pos0_64"] == pytest.approx(r["tau"])
        assert 0 <= r["low_rep_requests"] <= r["prompts"]
    for r in rows:  # each row's tau is its requests' tokens over their rounds
        mine = [q for q in requests if (q["drafter"], q["test_B"], q["T"]) ==
                (r["drafter"], str(r["test_B"]), str(r["T"]))]
        assert sum(int(q["committed"]) for q in mine) / sum(int(q["rounds"]) for q in mine) \
            == pytest.approx(r["tau"])
    same = compare(tmp_path, tmp_path)  # a run against itself: no difference, no noise
    assert sum(c["stratum"] == "all" for c in same) == len(rows)
    assert all(c["diff"] == 0 and c["two_se"] == 0 for c in same)


def test_decode_in_batches_is_generate_over_the_chunks(micro):
    """Greedy tokens of 5 requests decoded 2 at a time equal one batch of 5 (fp32, CPU);
    rounds, new tokens and times are the chunks' sums."""
    from reference.generate import generate
    from reference.loaders import load_target
    from toy.variants import load_variant

    out, _ = micro
    target = load_target(out / "target", device="cpu", dtype=torch.float32)
    prompts = [[5 + i, 9, 17 + 2 * i, 4][: 2 + i % 3] for i in range(5)]
    kw = dict(max_new_tokens=10, temperature=0.0)
    for proposer in (None, load_variant(out / "dflash-b8", target)):
        whole = generate(target, prompts, proposer=proposer, **kw)
        chunks = [generate(target, prompts[i:i + 2], proposer=proposer, **kw)
                  for i in (0, 2, 4)]
        got = decode_in_batches(target, prompts, 2, proposer=proposer, **kw)
        assert got.tokens == whole.tokens
        assert got.accept_lengths == [a for c in chunks for a in c.accept_lengths]
        assert got.stats["rounds"] == sum(c.stats["rounds"] for c in chunks)
        assert got.stats["new_tokens"] == sum(len(t) for t in whole.tokens)
        assert got.stats["tokens_per_s"] == pytest.approx(
            (got.stats["new_tokens"] - 5) / got.stats["decode_s"])
    with pytest.raises(ValueError, match="batch_size"):
        decode_in_batches(target, prompts, 0, **kw)


def test_hydra_entry_point(micro, tmp_path):
    out, _ = micro
    cmd = [sys.executable, "-m", "experiments.acceptance", f"artifacts={out}",
           "splits=[validation]", "temperatures=[0.0]", "drafters=[dflash-b8]", "prompts=corpus",
           "num_prompts=2", "prompt_len=[8,16]", "max_new_tokens=8", "max_files=40",
           "plots=false", f"hydra.run.dir={tmp_path}"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "results.csv").is_file() and (tmp_path / ".hydra").is_dir()
    bad = subprocess.run(cmd[:3] + ["no_such_key=1"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0


@pytest.mark.parametrize("overrides", [[], ["study=ablations", "num_prompts=8"],
                                       ["study=block_size", "block_sizes=[2,4]", "plots=false"]])
def test_composition_without_hydra_matches_hydra(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="base_acceptance", node=AcceptanceConfig)
    with initialize_config_dir(str(ROOT / "conf" / "acceptance"), version_base=None):
        want = OmegaConf.to_object(compose("config", overrides=overrides))
    assert config_without_hydra(overrides) == want


def test_default_artifacts_fall_back_to_the_committed_zoo(tmp_path, monkeypatch):
    """`python -m experiments.acceptance` as written: without a recipe's artifacts/toy the
    committed zoo is read; an explicit folder, or an artifacts/toy with a target, is kept;
    with neither (an installed copy run outside the checkout) one line says so."""
    from experiments.acceptance import DEFAULT_ARTIFACTS, ZOO, artifacts_folder

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="neither .* holds a target") as e:
        artifacts_folder(DEFAULT_ARTIFACTS)
    assert "\n" not in str(e.value)
    (tmp_path / ZOO / "target").mkdir(parents=True)
    assert artifacts_folder(DEFAULT_ARTIFACTS) == ZOO
    assert artifacts_folder("elsewhere") == "elsewhere"
    (tmp_path / DEFAULT_ARTIFACTS / "target").mkdir(parents=True)
    assert artifacts_folder(DEFAULT_ARTIFACTS) == DEFAULT_ARTIFACTS
    assert (ROOT / ZOO / "target" / "config.json").is_file()
