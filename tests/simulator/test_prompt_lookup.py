"""Prompt-lookup (n-gram) drafting in the simulator: a round is the target's verify of B tokens
and nothing else on the GPU, memory is plain decoding's, the placeholder preset and the replay
of recorded commits drive its acceptance, and `python -m workbench simulate spec=prompt_lookup`
runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.calibrated import CalibratedCostModel
from simulator.costs import RooflineCostModel
from simulator.methods import make_method
from simulator.methods.prompt_lookup import HOST_PER_REQ_S, PLACEHOLDER_TAU, PromptLookup
from simulator.params import ConfigError, SimConfig
from simulator.shapes import kv_budget
from tests.simulator.synthetic_calibration import TOY, write_table

REPO = Path(__file__).resolve().parents[2]
SPEC = dict(method="prompt_lookup", block_size=8, draft_layers=0, decay_logit=0.0,
            difficulty_sigma=1.5)


def _cfg(**spec) -> SimConfig:
    return SimConfig.coerce({"spec": {**SPEC, **spec}})


def _by_hand(cfg: SimConfig, q: np.ndarray, kv: np.ndarray, head_rows: float) -> float:
    """The roofline's target forward of q tokens per request on kv cached ones, plus the LM
    head on head_rows rows, written out from the cost model's formula."""
    m, hw = cfg.model, cfg.hardware
    flops = hw.matmul_tflops * 1e12 * hw.matmul_efficiency
    bw = hw.hbm_tbps * 1e12 * hw.bandwidth_efficiency
    H, L, d, dt = m.hidden_size, m.num_layers, m.head_dim, m.dtype_bytes
    params = L * (H * d * (2 * m.num_heads + 2 * m.num_kv_heads) + 3 * H * m.intermediate_size)
    tokens = q.sum()
    linear = max(2.0 * params * tokens / flops,
                 (params * dt + tokens * L * (6 * H + 3 * m.intermediate_size) * dt) / bw)
    pairs = (q * kv).sum() + (q * (q + 1) / 2).sum()  # causal inside the block
    attn = max(pairs * 4.0 * L * m.num_heads * d / (flops * hw.attention_efficiency),
               (kv.sum() + tokens) * 2 * L * m.num_kv_heads * d * dt / bw)
    head = max(2.0 * m.vocab_size * H * head_rows / flops,
               (m.vocab_size * H * dt + head_rows * m.vocab_size * 8) / bw)
    return linear + hw.launch_overhead_s + attn + head


def test_round_costs_the_verify_of_B_tokens_and_no_draft():
    cfg = _cfg()
    cost, method = RooflineCostModel(cfg), make_method(cfg)
    assert isinstance(method, PromptLookup)
    q = method.verify_lens(5)
    assert q.tolist() == [8] * 5
    kv = np.array([100, 350, 900, 1200, 4000])
    verify = _by_hand(cfg, q, kv, head_rows=40)  # the LM head on every verified row
    assert method.decode_gpu_s(cost, q, kv) == pytest.approx(verify, rel=1e-9)
    assert cost.draft is None and cost.kv_materialize_s(40) == 0.0
    prompt = _by_hand(cfg, np.array([300]), np.array([0]), head_rows=1)  # no draft KV to fill
    assert method.prefill_gpu_s(cost, np.array([300]), np.array([0])) == pytest.approx(
        prompt, rel=1e-9)


def test_the_n_gram_match_is_host_time_per_request():
    assert make_method(_cfg()).host_plan_s(16) == pytest.approx(16 * HOST_PER_REQ_S)
    assert make_method(_cfg(block_size=1)).host_plan_s(16) == 0.0
    assert PromptLookup(8, host_per_req_s=0.0).host_plan_s(16) == 0.0


def test_memory_is_plain_decodings_even_with_drafter_fields_set():
    plain = kv_budget(SimConfig.coerce({"spec": dict(method="none", block_size=1,
                                                     draft_layers=0)}))
    lookup = kv_budget(_cfg(draft_layers=5))
    assert lookup == plain
    assert lookup.draft_weight_bytes == 0 and lookup.draft_kv_bytes_per_token == 0


@pytest.mark.parametrize("dataset", sorted(PLACEHOLDER_TAU))
def test_preset_is_the_placeholder_tau_per_request(dataset):
    cfg = SimConfig.coerce({"spec": SPEC, "workload": dict(
        dataset=dataset, num_requests=600, concurrency=32, prompt_tokens_mean=64,
        output_tokens_mean=400, output_dist="exponential")})
    s = simulator.run(cfg).summary["speculation"]
    assert s["tau_per_request"] == pytest.approx(PLACEHOLDER_TAU[dataset], rel=0.08)
    assert 1.0 < s["tau"] <= s["tau_per_request"]  # rounds weigh the slow requests more


def test_replay_of_recorded_commits_drives_it(tmp_path):
    path = tmp_path / "accept.json"
    path.write_text(json.dumps({"accept_lengths": [[1, 1, 4, 8, 1, 3], [2, 1, 1, 6]]}))
    cfg = SimConfig.coerce({"spec": {**SPEC, "acceptance": "replay",
                                     "replay_path": str(path)},
                            "workload": dict(num_requests=40, concurrency=4)})
    hist = simulator.run(cfg).summary["speculation"]["commit_hist"]
    assert {k for k, c in enumerate(hist) if c} <= {1, 2, 3, 4, 6, 8}


def test_calibrated_tables_do_not_cover_it(tmp_path):
    path = write_table(tmp_path / "t.json")
    cfg = SimConfig.coerce({"model": TOY, "spec": SPEC, "engine": dict(
        cost_model="calibrated", calibration=str(path))})
    with pytest.raises(ConfigError, match=r"methods \(none, dflash\) only"):
        CalibratedCostModel(cfg)


def test_simulate_command_runs_it(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "simulate", "experiment=smoke", "spec=prompt_lookup",
         "workload.concurrency=2", "sweep.concurrency=[2]", f"hydra.run.dir={out}"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "summary.json").read_text())["runs"]
    lookup = next(r for r in runs if r["method"] == "prompt_lookup")
    none = next(r for r in runs if r["method"] == "none")
    assert lookup["block_size"] == 8 and lookup["requests"]["finished"] > 0
    assert lookup["kv"]["capacity_tokens"] == none["kv"]["capacity_tokens"]
    assert lookup["speculation"]["tau"] > 1.0
