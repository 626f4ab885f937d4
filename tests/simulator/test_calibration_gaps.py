"""Calibration tables with unmeasured parts (a GPU run out of budget): the draft block's
structural gap fill, roofline stand-ins labelled as such, the borrowed host line, and the
prefill wall that already contains the host (TTFT counts it once)."""

import json

import numpy as np
import pytest

from simulator.calibrated import CalibratedCostModel
from simulator.calibration import build_tables, load_calibration
from simulator.params import ModelParams, SimConfig
from tests.simulator.synthetic_calibration import HOST, TOY, write_table
from workbench.calibrate.cli import borrow, fit


def _cfg(path, method="dflash"):
    spec = (dict(method="none", block_size=1, draft_layers=0) if method == "none" else
            dict(method="dflash", block_size=8, draft_layers=2,
                 options={"target_features": 3}))
    return SimConfig.coerce({"model": TOY, "spec": spec,
                             "engine": dict(cost_model="calibrated", calibration=str(path))})


def _drop(path, table, keep=lambda idx: False):
    doc = json.loads(path.read_text())
    s = np.array(doc["tables"][table]["seconds"], dtype=object)
    for idx in np.ndindex(s.shape):
        if not keep(idx):
            s[idx] = None
    doc["tables"][table]["seconds"] = s.tolist()
    path.write_text(json.dumps(doc))
    return doc


def test_draft_gaps_follow_the_target_layers_not_a_flat_line(tmp_path):
    path = write_table(tmp_path / "t.json")
    full = build_tables(json.loads(path.read_text()))["draft"].values
    doc = _drop(path, "draft", keep=lambda idx: idx[0] < 3 or idx == (3, 0, 0))  # n=64: 1 pt
    built = build_tables(doc)
    d, t, h = built["draft"], built["target"], built["lm_head"]
    measured = np.isfinite(d.raw)
    assert np.array_equal(d.values[measured], full[measured])  # measurements untouched
    share = doc["drafter"]["num_layers"] / doc["model"]["num_layers"]
    for j, b in enumerate(d.axes[1]):
        for k, kv in enumerate(d.axes[2]):
            if (j, k) == (0, 0):
                continue
            structural = h(64 * (b - 1)) + share * t(64, b, kv)
            ratio = d.raw[2, j, k] / (h(16 * (b - 1)) + share * t(16, b, kv))
            below = measured & np.all(np.indices(d.raw.shape) <= np.reshape((3, j, k),
                                                                         (-1, 1, 1, 1)), 0)
            floor = d.monotone[below].max()  # a gap is at least every measurement of less work
            assert d.values[3, j, k] == pytest.approx(max(ratio * structural, floor))


def test_unmeasured_pieces_use_the_roofline_and_say_so(tmp_path):
    path = write_table(tmp_path / "t.json")
    for name in ("lm_head", "inject", "prefill"):
        _drop(path, name)
    cm = CalibratedCostModel(_cfg(path))
    assert cm.unmeasured == ["inject", "lm_head", "prefill"]
    assert "roofline for unmeasured inject, lm_head, prefill" in cm.label
    assert cm.lm_head_s(64) == pytest.approx(cm.roof.lm_head_s(64))
    assert cm.kv_materialize_s(100) == pytest.approx(cm.roof.kv_materialize_s(100))
    q, kv = np.full(4, 512), np.zeros(4)
    assert cm.prefill_forward_s(q, kv) == pytest.approx(
        cm.prefill_scale * cm.roof.prefill_forward_s(q, kv))
    assert cm.prefill_scale > 0


def test_prefill_wall_counts_the_host_once(tmp_path):
    path = write_table(tmp_path / "t.json")
    cm = CalibratedCostModel(_cfg(path, "none"))
    built = load_calibration(str(path), ModelParams(**TOY))["built"]
    n, q = 4, np.full(4, 128)
    total = (cm.host_plan_s(n) + cm.prefill_forward_s(q, np.zeros(n)) + cm.lm_head_s(n)
             + cm.host_process_s(n))
    assert total == pytest.approx(built["prefill"](n, 128, 0))
    assert cm.host_plan_s(n) + cm.host_process_s(n) == pytest.approx(
        HOST["none"]["a_s"] + HOST["none"]["b_s"] * n)


def _doc(name, host_runs):
    doc = json.loads(write_table_doc())
    doc["model"]["name"] = name
    doc["grid"] = {"host_n": [1, 4]}
    doc["heldout"] = {}
    doc["host_runs"] = {"graph": host_runs, "eager": []}
    return doc


def write_table_doc():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        return write_table(Path(tmp) / "t.json").read_text()


def test_skipped_host_runs_leave_no_fit_and_borrow_the_donors_line():
    run = lambda n: {m: {"n": n, "block": 1 if m == "none" else 8, "kv": 300.0,  # noqa: E731
                         "wall_s": 0.01 + 1e-4 * n} for m in ("none", "dflash")}
    donor, empty = fit(_doc("donor", [run(1), run(4)])), fit(_doc("empty", []))
    assert empty["host"] == {}
    borrow([donor, empty])
    for m in ("none", "dflash"):
        assert empty["host"][m]["source"] == "donor"
        assert empty["host"][m]["a_s"] == donor["host"][m]["a_s"]
        assert "source" not in donor["host"][m]
