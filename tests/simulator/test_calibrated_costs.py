"""The calibrated cost model: tables, interpolation, metadata refusal, the engine's round
composition, extrapolation to other hardware, and replay of recorded commit traces."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simulator
from simulator.calibrated import CalibratedCostModel
from simulator.calibration import Table, fill_gaps, load_calibration, round_gpu_s
from simulator.methods import NoSpec
from simulator.methods.dflash import DFlash
from simulator.params import ConfigError, ModelParams, SimConfig
from tests.simulator.synthetic_calibration import BUCKETS, HOST, TOY, write_table

AXES = st.lists(st.floats(1, 1e4), min_size=1, max_size=4, unique=True).map(sorted)


@given(st.lists(AXES, min_size=1, max_size=3), st.integers(0, 2**32 - 1))
def test_interpolation_is_exact_at_grid_points(axes, seed):
    values = np.random.default_rng(seed).uniform(1e-5, 1.0, [len(a) for a in axes])
    for axis in range(values.ndim):  # non-decreasing along every axis: the envelope keeps it
        values = np.cumsum(values, axis=axis)
    t = Table({f"a{i}": a for i, a in enumerate(axes)}, values)
    for idx in np.ndindex(values.shape):
        assert t(*[a[i] for a, i in zip(axes, idx)]) == pytest.approx(values[idx], rel=1e-9)


@given(st.floats(0, 5000), st.floats(0, 100), st.floats(-1, 1e5))
def test_multilinear_functions_are_reproduced_in_and_beyond_the_grid(n, q, kv):
    f = lambda n, q, kv: 1 + 2 * n + 3 * q * kv + 0.5 * n * q * kv  # noqa: E731
    axes = [np.array([1.0, 8.0, 64.0]), np.array([1.0, 4.0, 16.0]), np.array([0.0, 1e3, 3e4])]
    t = Table({"n": axes[0], "q": axes[1], "kv": axes[2]},
              f(*np.meshgrid(*axes, indexing="ij")))
    assert t(n, q, kv) == pytest.approx(max(f(n, q, kv), 0.0), rel=1e-6, abs=1e-6)


def test_gaps_are_filled_by_a_line_fit_and_marked():
    kv = np.array([128.0, 512.0, 2048.0, 8192.0])
    line = 1e-3 + 1e-7 * kv
    grid = np.stack([line, 2 * line])
    grid[1, 3] = np.nan
    filled, mask = fill_gaps(grid, [np.array([1.0, 2.0]), kv])
    assert filled[1, 3] == pytest.approx(2 * line[3], rel=1e-9)
    assert mask.sum() == 1 and mask[1, 3]


def _cfg(path, method="dflash", block=8, hardware=None, model=None, draft_layers=2):
    spec = (dict(method="none", block_size=1, draft_layers=0) if method == "none" else
            dict(method="dflash", block_size=block, draft_layers=draft_layers,
                 options={"target_features": 3}))
    cfg = {"model": model or TOY, "spec": spec,
           "engine": dict(cost_model="calibrated", calibration=str(path))}
    if hardware:
        cfg["hardware"] = hardware
    return SimConfig.coerce(cfg)


def test_refuses_a_table_of_other_model_shapes(tmp_path):
    path = write_table(tmp_path / "t.json", {**TOY, "hidden_size": 512})
    with pytest.raises(ConfigError, match="hidden_size: table 512 vs model 256"):
        CalibratedCostModel(_cfg(path))
    with pytest.raises(ConfigError, match="not found"):
        load_calibration(str(tmp_path / "missing.json"), ModelParams(**TOY))
    with pytest.raises(ConfigError, match="drafter of 2 layers"):
        CalibratedCostModel(_cfg(write_table(tmp_path / "ok.json"), draft_layers=5))


@given(st.integers(1, 70), st.sampled_from([4, 8, 16]), st.integers(0, 2000),
       st.integers(1, 5))
def test_method_sum_is_the_engines_padded_round(tmp_path_factory, n, block, kv, rounds):
    path = write_table(tmp_path_factory.mktemp("t") / "t.json")
    kvs = np.full((rounds, n), float(kv))
    for method, sim in (("none", NoSpec()), ("dflash", DFlash(block))):
        cost = CalibratedCostModel(_cfg(path, method, block))
        q = sim.verify_lens(n)
        got = np.atleast_1d(sim.decode_gpu_s(cost, q, kvs))
        built = load_calibration(str(path), ModelParams(**TOY))["built"]
        want = round_gpu_s(built, BUCKETS, n, sim.block_size, kv)
        assert got == pytest.approx(np.full(rounds, want), rel=1e-9)
        assert cost.host_plan_s(n) + cost.host_process_s(n) == pytest.approx(
            HOST[method]["a_s"] + HOST[method]["b_s"] * n)


def test_other_hardware_is_extrapolated_and_labelled(tmp_path):
    path = write_table(tmp_path / "t.json")
    b200 = dict(name="b200", source="datasheet", memory_gb=180.0, hbm_tbps=8.0,
                matmul_tflops=2250.0, matmul_efficiency=0.8, bandwidth_efficiency=0.9)
    h200, fast = CalibratedCostModel(_cfg(path)), CalibratedCostModel(_cfg(path, hardware=b200))
    assert "extrapolated to b200 from h200" in fast.label and "extrapolated" not in h200.label
    q, kv = np.full(4, 8), np.full(4, 512.0)
    assert 0 < fast.target_forward_s(q, kv) < h200.target_forward_s(q, kv)
    assert fast.lm_head_s(32) < h200.lm_head_s(32)


def test_replay_reproduces_a_recorded_commit_trace(tmp_path):
    traces = [[3, 1, 8, 2, 4, 8, 1, 3], [8, 8, 8, 2, 4], [1] * 11 + [4, 3, 4, 4, 4]]
    out = 31  # the prefill's token + 30 committed: every trace sums to 30
    assert all(sum(t) == out - 1 for t in traces)
    (tmp_path / "trace.json").write_text(json.dumps(traces))
    cfg = {"model": TOY, "spec": dict(method="dflash", block_size=8, draft_layers=2,
                                      options={"target_features": 3}, acceptance="replay",
                                      replay_path=str(tmp_path / "trace.json")),
           "engine": dict(mode="sync", kv_reserve_blocks=1, cost_model="calibrated",
                          calibration=str(write_table(tmp_path / "t.json"))),
           "workload": dict(arrival="closed_loop", concurrency=3, num_requests=3,
                            prompt_tokens_mean=64, prompt_tokens_cv=0.0,
                            output_tokens_mean=out, output_tokens_cv=0.0, max_new_tokens=out)}
    r = simulator.run(cfg)
    assert r.requests["decode_rounds"].tolist() == [len(t) for t in traces]
    hist = np.bincount([c for t in traces for c in t], minlength=9)
    assert r.summary["speculation"]["commit_hist"] == hist.tolist()
    assert r.summary["cost_model"].startswith("calibrated")


def test_host_from_engine_params_when_asked(tmp_path):
    """host_from_calibration=false: plan and process are engine.host_* (a serving loop's own
    measured host), while the prefill still sheds the table's own host line."""
    path = write_table(tmp_path / "t.json")
    engine = dict(cost_model="calibrated", calibration=str(path), host_plan_s=1e-3,
                  host_plan_per_req_s=2e-5, host_process_s=3e-4, host_process_per_req_s=0.0)
    spec = dict(method="dflash", block_size=8, draft_layers=2, options={"target_features": 3})
    own = CalibratedCostModel(SimConfig.coerce({"model": TOY, "spec": spec, "engine": engine}))
    table = CalibratedCostModel(SimConfig.coerce(
        {"model": TOY, "spec": spec, "engine": {**engine, "host_from_calibration": True}}))
    off = CalibratedCostModel(SimConfig.coerce(
        {"model": TOY, "spec": spec, "engine": {**engine, "host_from_calibration": False}}))
    assert off.host_plan_s(4) == pytest.approx(1e-3 + 4 * 2e-5)
    assert off.host_process_s(4) == pytest.approx(3e-4)
    assert own.host_plan_s(4) == table.host_plan_s(4)
    assert table.host_plan_s(4) + table.host_process_s(4) == pytest.approx(
        HOST["dflash"]["a_s"] + HOST["dflash"]["b_s"] * 4)
    q, kv = np.full(3, 64.0), np.zeros(3)
    assert off.prefill_forward_s(q, kv) == table.prefill_forward_s(q, kv)


def test_spec_v2_bounds_prefill_by_the_launch_only_without_a_measured_prefill():
    """experiments/spec_v2: the serving loop's prefill launch enters the simulator unless the
    calibration table measured the prefill (its fit already holds the engine's launch)."""
    from experiments.spec_v2 import hardware, measured_prefill, sim_config

    assert measured_prefill("h200/qwen3-8b") and not measured_prefill("h200/toy")
    assert not measured_prefill(None)
    setup = {"drafter": {"block_size": 16, "layers": 2, "target_features": 3},
             "prefill_budget": 8192, "prompt_tokens_mean": 100.0, "output_tokens_mean": 64.0,
             "output_tokens_max": 64, "model": {"name": "toy"}}
    row = {"method": "ar", "concurrency": 4, "mode": "sync", "requests": 8,
           "plan_ms_per_step": 0.2, "launch_ms_per_step": 1.0, "process_ms_per_step": 0.1,
           "prefill_launch_ms": 7.0}
    hw = hardware("h200")
    launch = [sim_config(setup, row, hw, model, calibration=table)["engine"]["prefill_launch_s"]
              for model, table in (("roofline", None), ("calibrated", "h200/toy"),
                                   ("calibrated", "h200/qwen3-8b"))]
    assert launch == [0.007, 0.007, 0.0]
