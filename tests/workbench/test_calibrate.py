"""`workbench calibrate` end to end on the CPU (tiny model, quick grid), and the validation
report from a synthetic measurement file whose rounds follow a known timing model."""

import json

import numpy as np
import pytest

import simulator
from simulator.calibration import load_calibration, monotone_envelope, round_gpu_s
from simulator.params import ModelParams
from tests.simulator.synthetic_calibration import BUCKETS, HOST, TOY, write_table
from workbench.calibrate import cli as calibrate
from workbench.validate import report as validation_report

TINY = dict(name="tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
            head_dim=16, intermediate_size=128, vocab_size=256, tie_embeddings=False,
            dtype_bytes=4)


def test_quick_calibration_end_to_end_on_cpu(tmp_path):
    assert calibrate.main(["model=tiny", "hardware=h200", "--quick", "--device", "cpu",
                           "--out", str(tmp_path), "--budget-s", "600"]) == 0
    doc = json.loads((tmp_path / "tiny.json").read_text())
    assert doc["model"] == {**TINY, "preset": "random:tiny"}
    assert doc["hardware"]["name"] == "h200" and doc["versions"]["torch"]
    assert {"git_sha", "date", "grid", "heldout", "host_runs", "kernels"} <= set(doc)
    for op in ("target", "draft", "lm_head", "inject", "prefill"):
        seconds = np.array(doc["tables"][op]["seconds"], dtype=float)
        assert np.isfinite(seconds).all() and (seconds > 0).all(), op
        assert doc["report"][op]["points"] >= 1, op
    assert set(doc["host"]) == {"none", "dflash"}
    built = load_calibration(str(tmp_path / "tiny.json"), ModelParams(**TINY))["built"]
    point = doc["heldout"]["target"][0]["at"]
    measured = monotone_envelope(np.array(doc["tables"]["target"]["seconds"], dtype=float))
    assert built["target"](1, 4, 32) == pytest.approx(measured[0, 1, 1])
    assert built["target"](*point) > 0
    r = simulator.run({"model": TINY, "spec": dict(method="dflash", block_size=4,
                                                   draft_layers=1,
                                                   options={"target_features": 2}),
                       "engine": dict(cost_model="calibrated",
                                      calibration=str(tmp_path / "tiny.json")),
                       "workload": dict(num_requests=4, concurrency=2, prompt_tokens_mean=16,
                                        output_tokens_mean=8, max_new_tokens=16)})
    assert r.summary["requests"]["finished"] == 4

    # a calibration whose budget ran out before the prefill, completed by --prefill-into
    cut = {**doc, "tables": {**doc["tables"], "prefill": {
        **doc["tables"]["prefill"],
        "seconds": np.full(np.shape(doc["tables"]["prefill"]["seconds"]), None).tolist()}},
        "heldout": {**doc["heldout"], "prefill": []}, "skipped": {"prefill": 3}}
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    with pytest.raises(SystemExit):  # the file holds another model
        calibrate.main(["model=toy", "--quick", "--device", "cpu", "--out",
                        str(tmp_path / "x"), "--prefill-into", str(tmp_path / "cut.json")])
    assert calibrate.main(["model=tiny", "--quick", "--device", "cpu", "--budget-s", "600",
                           "--out", str(tmp_path / "filled"),
                           "--prefill-into", str(tmp_path / "cut.json")]) == 0
    filled = json.loads((tmp_path / "filled" / "tiny.json").read_text())
    seconds = np.array(filled["tables"]["prefill"]["seconds"], dtype=float)
    assert np.isfinite(seconds).all() and (seconds > 0).all()
    assert filled["report"]["prefill"]["points"] >= 1 and "prefill" not in filled["skipped"]
    assert filled["prefill_stamp"]["versions"]["torch"]
    for op in ("target", "draft", "lm_head", "inject"):
        assert filled["tables"][op] == doc["tables"][op], op


def _synthetic_run(built, method, c, block, prompt, new, rng) -> dict:
    """An engine run whose round walls are the table's padded round plus the host line."""
    if method == "none":
        traces = [[1] * (new - 1) for _ in range(c)]
    else:
        traces = []
        for _ in range(c):
            t, left = [], new - 1
            while left:
                t.append(min(int(rng.integers(1, block + 1)), left))
                left -= t[-1]
            traces.append(t)
    host = HOST[method]
    rounds, done = [], np.zeros(c, dtype=int)
    for k in range(max(map(len, traces))):
        live = [i for i in range(c) if len(traces[i]) > k]
        kv = float(np.mean([prompt + done[i] for i in live]))
        wall = (round_gpu_s(built, BUCKETS, len(live), 1 if method == "none" else block, kv)
                + host["a_s"] + host["b_s"] * len(live))
        rounds.append([len(live), wall, 0.0, 0.0, 0.0, 0.0])
        for i in live:
            done[i] += traces[i][k]
    pre = built["prefill"](c, prompt, 0)  # the table is Engine.prefill's wall: host inside
    if method == "dflash":
        pre += built["inject"](c * prompt)
    return {"prefill_s": pre, "tokens_per_request": [new] * c, "accept_lengths": traces,
            "round_times": rounds}


def test_validation_report_from_synthetic_measurements(tmp_path):
    table = write_table(tmp_path / "toy.json")
    built = load_calibration(str(table), ModelParams(**TOY))["built"]
    rng = np.random.default_rng(0)
    runs = []
    for c in (1, 3):
        for method, block in (("none", 1), ("dflash", 4)):
            for r in range(2):
                run = _synthetic_run(built, method, c, max(block, 4), 64, 17, rng)
                runs.append({"concurrency": c, "method": method, "block": block, "repeat": r,
                             **run})
    doc = {"model": "toy", "device": "synthetic", "versions": {"torch": "-", "triton": "-"},
           "date": "-", "git_sha": None, "compile": True, "runs": runs,
           "setup": {"prompt_tokens": 64, "new_tokens": 17, "alpha": 0.8, "blocks": [4],
                     "concurrency": [1, 3], "repeats": 2, "engine": "synthetic"}}
    measured = tmp_path / "validation-toy.json"
    measured.write_text(json.dumps(doc))
    out = tmp_path / "report"
    assert validation_report.main([str(measured), "--calibration", str(table),
                                   "--out-dir", str(out)]) == 0
    md = (out / "h200-toy.md").read_text()
    assert "Where the simulator is weakest" in md and "real-vs-real spread" in md
    assert (out / "h200-toy.png").stat().st_size > 0
    rows = validation_report.evaluate(doc, str(table), TOY)
    assert len(rows) == 4 and len((out / "h200-toy.csv").read_text().splitlines()) == 5
    for row in rows:
        for m in ("throughput", "tpot_mean", "ttft"):
            assert abs(row[f"{m}_replay_err_pct"]) < 2.0, (row, m)


def test_every_grid_shape_is_warmed_largest_block_first_before_timing():
    import contextlib

    from workbench.calibrate.gpu import Bench

    class Stub:
        in_time = True

        @contextlib.contextmanager
        def rows(self, n, length):
            yield list(range(n))

    calls = []
    Bench.warm_shapes(Stub(), {"n": [1, 4], "q": [1, 2, 16], "kv": [512, 128]},
                      lambda rows, x, y: calls.append((len(rows), x, y)))
    assert calls == [(1, 16, 128), (1, 2, 128), (1, 1, 128), (4, 16, 128), (4, 2, 128),
                     (4, 1, 128)]
    Stub.in_time = False  # out of budget: no warm-up (and no point counted as skipped)
    calls.clear()
    Bench.warm_shapes(Stub(), {"n": [1], "q": [1], "kv": [8]}, lambda *a: calls.append(a))
    assert calls == []
