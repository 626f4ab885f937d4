"""The tables' monotone envelope: a cold, slow first row is replaced by the larger workloads'
time, a monotone table is left as measured, and the host fit leaves out the runs that ran
slower on the device than the tables describe."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.calibration import Table, build_tables, monotone_envelope
from tests.simulator.synthetic_calibration import target_s, write_table
from workbench.calibrate.fit import fit

N, Q, KV = [1.0, 4.0, 16.0], [1.0, 4.0, 16.0], [128.0, 2048.0]
GRID = target_s(*np.meshgrid(N, Q, KV, indexing="ij"))


def _monotone(a: np.ndarray) -> bool:
    return all((np.diff(a, axis=k) >= 0).all() for k in range(a.ndim))


def test_a_slow_first_row_takes_the_larger_workloads_time():
    slow = GRID.copy()
    slow[0, 1:] *= [[1.5], [3.0]]  # n = 1, q > 1: measured first, up to 3x slower than n = 4
    t = Table({"n": N, "q": Q, "kv": KV}, slow)
    assert np.array_equal(t.raw, slow)  # the measurements are kept as recorded
    assert t.lowered == 4
    assert np.allclose(t.values[0, 1:], np.minimum(slow[0, 1:], GRID[1, 1:]))
    assert t(1, 16, 128) == pytest.approx(GRID[1, 2, 0])  # n = 4's time, not 3x n = 1's
    assert np.array_equal(t.values[1:], GRID[1:]) and np.array_equal(t.values[0, 0], GRID[0, 0])
    assert _monotone(t.values)


def test_a_monotone_table_is_unchanged():
    t = Table({"n": N, "q": Q, "kv": KV}, GRID)
    assert t.lowered == 0 and np.array_equal(t.values, GRID)
    for idx in np.ndindex(GRID.shape):
        assert t(N[idx[0]], Q[idx[1]], KV[idx[2]]) == pytest.approx(GRID[idx], rel=1e-12)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(0, 2**32 - 1),
       st.floats(0.0, 0.5))
def test_envelope_is_the_largest_monotone_grid_below_the_measurements(shape, seed, holes):
    rng = np.random.default_rng(seed)
    a = rng.uniform(1e-4, 1.0, shape)
    a[rng.uniform(size=shape) < holes] = np.nan
    env = monotone_envelope(a)
    ok = np.isfinite(a)
    assert np.array_equal(np.isfinite(env), ok)  # unmeasured stays unmeasured
    assert (env[ok] <= a[ok]).all()
    assert np.array_equal(monotone_envelope(env), env, equal_nan=True)  # idempotent
    for i in zip(*np.nonzero(ok)):  # each cell: the minimum over cells >= it on every axis
        above = ok & np.all(np.indices(a.shape) >= np.reshape(i, (-1,) + (1,) * a.ndim), 0)
        assert env[i] == a[above].min()
    full = np.where(ok, a, 1.0)
    assert _monotone(monotone_envelope(full))
    if ok.any():  # the predictor's grid: gaps filled, monotone, and no measurement lowered
        t = Table({f"a{k}": np.arange(1.0, m + 1) for k, m in enumerate(shape)}, a)
        assert _monotone(t.values) and np.array_equal(t.values[ok], env[ok])


def test_a_slow_first_draft_row_is_lowered_through_the_structural_fill(tmp_path):
    doc = json.loads(write_table(tmp_path / "t.json").read_text())
    s = np.array(doc["tables"]["draft"]["seconds"])
    s[0] *= 2.0  # n = 1 twice n = 4's time
    doc["tables"]["draft"]["seconds"] = s.tolist()
    d = build_tables(doc)["draft"]
    assert d.lowered == s[0].size and np.allclose(d.values[0], np.minimum(s[0], s[1]))
    assert _monotone(d.values)


def _run(n, method, device_s, wall_s):
    return {"n": n, "block": 1 if method == "none" else 8, "kv": 300.0, "wall_s": wall_s,
            "device_s": device_s}


def test_host_fit_leaves_out_runs_slower_on_the_device_than_the_tables(tmp_path):
    doc = json.loads(write_table(tmp_path / "t.json").read_text())
    doc.update(grid={"host_n": [1, 4, 16]}, heldout={})
    built = build_tables(doc)
    from simulator.calibration import round_gpu_s

    runs = []
    for n in (1, 4, 16):
        row = {}
        for m in ("none", "dflash"):
            gpu = round_gpu_s(built, doc["engine"]["buckets"], n, 1 if m == "none" else 8, 300.0)
            slow = 2.0 if (n, m) == (1, "dflash") else 1.03  # a cold n = 1 DFlash graph
            row[m] = _run(n, m, slow * gpu, slow * gpu + 5e-4 + 1e-5 * n)
        runs.append(row)
    doc["host_runs"] = {"graph": runs, "eager": []}
    host = fit(doc)["host"]
    assert host["dflash"]["excluded_n"] == [1] and host["none"]["excluded_n"] == []
    for m in ("none", "dflash"):  # the line through the kept runs: 3% missed device + host
        kept = [r[m] for r in runs if r[m]["n"] not in host[m]["excluded_n"]]
        for r in kept:
            assert host[m]["a_s"] + host[m]["b_s"] * r["n"] == pytest.approx(
                r["wall_s"] - r["gpu_pred_s"], rel=1e-6)
