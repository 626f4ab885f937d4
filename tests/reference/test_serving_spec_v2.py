"""`python -m experiments.spec_v2` on a small synthetic serve-bench result (CPU, seconds)."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("simpy")

from experiments.spec_v2 import calibrations, geometric_alpha, main, sim_config  # noqa: E402

QWEN3_8B = {"name": "qwen3-8b", "hidden_size": 4096, "num_layers": 36, "num_heads": 32,
            "num_kv_heads": 8, "head_dim": 128, "intermediate_size": 12288,
            "vocab_size": 151936, "tie_embeddings": False, "dtype_bytes": 2}


def _row(method, conc, mode, tok_s, tau):
    return {"setup": "qwen3-8b", "method": method, "concurrency": conc, "mode": mode,
            "requests": 3 * conc, "throughput_tok_s": tok_s, "tpot_ms": 1e3 * conc / tok_s,
            "gpu_idle_fraction": 0.2 if mode == "sync" else 0.01, "tau": tau,
            "plan_ms_per_step": 0.2, "launch_ms_per_step": 1.5, "process_ms_per_step": 0.3}


def _doc():
    setup = {"model": QWEN3_8B, "drafter": {"layers": 5, "block_size": 16,
                                            "target_features": 5},
             "oracle_survival": [0.85 ** j for j in range(1, 16)], "prompt_tokens_mean": 256.0,
             "prompt_tokens_cv": 0.0, "output_tokens_mean": 128.0, "output_tokens_max": 128,
             "prefill_budget": 8192}
    rows = [_row(m, c, mode, tok * c, tau) for m, tok, tau in (("ar", 150.0, 1.0),
                                                                 ("oracle", 800.0, 5.9))
            for c in (1, 4) for mode in ("sync", "overlap")]
    return {"env": {"gpu": "synthetic"}, "meta": {"git_sha": "0" * 40},
            "setups": {"qwen3-8b": setup}, "rows": rows}


def test_geometric_alpha_inverts_the_survival_sum():
    for tau, block in ((6.5, 16), (2.0, 4), (1.0, 8)):
        alpha = geometric_alpha(tau, block)
        assert abs(1 + sum(alpha**j for j in range(1, block)) - tau) < 1e-9


def test_sim_config_maps_the_measured_run():
    doc = _doc()
    setup = doc["setups"]["qwen3-8b"]
    ar = sim_config(setup, doc["rows"][0], {"name": "h200"}, "roofline")
    assert ar["spec"]["method"] == "none" and ar["engine"]["mode"] == "sync"
    assert ar["engine"]["kv_reserve_blocks"] == 1
    assert ar["engine"]["host_plan_s"] == pytest.approx(1.7e-3)
    spec = sim_config(setup, doc["rows"][-1], {"name": "h200"}, "roofline")
    assert spec["spec"]["alpha"] == pytest.approx(0.85) and spec["engine"]["mode"] == "overlap"
    assert spec["engine"]["kv_reserve_blocks"] == 2
    assert spec["workload"]["concurrency"] == 4 and spec["workload"]["num_requests"] == 12
    # with the per-kind split, the host term is the decode rounds' launch, not the average
    # that the (host-bound, eager) prefill launches inflate
    split = sim_config(setup, {**doc["rows"][0], "decode_launch_ms": 0.9}, {"name": "h200"},
                       "roofline")
    assert split["engine"]["host_plan_s"] == pytest.approx(1.1e-3)


def test_calibration_per_setup():
    assert calibrations(None) == {}
    assert calibrations("h200/qwen3-8b") == {None: "h200/qwen3-8b"}
    assert calibrations("qwen3-8b=h200/qwen3-8b,toy=h200/toy") == {
        "qwen3-8b": "h200/qwen3-8b", "toy": "h200/toy"}


def test_report_files(tmp_path):
    measured = tmp_path / "serve_bench.json"
    measured.write_text(json.dumps(_doc()))
    out = tmp_path / "report"
    rows = main(["--measured", str(measured), "--out", str(out)])
    assert len(rows) == 8
    with (out / "comparison.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and all(float(r["predicted_tok_s"]) > 0 for r in table)
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted_tok_s"] / r["measured_tok_s"] - 1)
        assert 0.0 <= r["predicted_idle"] <= 1.0
    md = (out / "comparison.md").read_text()
    assert "overlap / sync measured" in md and md.count("| qwen3-8b |") == 8 + 4
    assert (out / "throughput.png").stat().st_size > 1000
    with pytest.raises(SystemExit):
        main(["--measured", str(measured), "--out", str(out), "--cost-model", "nope"])


def test_host_sweep_gain_grows_with_host_time_and_crossing_interpolates(monkeypatch):
    from experiments import spec_v2_host

    monkeypatch.setattr(spec_v2_host, "HOST_MS", (0.1, 2.0, 8.0))
    doc = _doc()
    for row in doc["rows"]:
        row["gap_ms_per_step"] = 1.0
    rows, measured = spec_v2_host.sweep(doc, "qwen3-8b", "oracle", 4, hardware_h200(),
                                        "roofline", None)
    gains = [r["gain"] for r in rows]
    assert gains == sorted(gains) and gains[0] >= 0.99 and gains[-1] > 1.1
    assert measured == {"host_ms": 1.0, "gain": 1.0}  # the synthetic pair has equal tok/s
    line = [{"host_ms": 1.0, "gain": 1.0}, {"host_ms": 3.0, "gain": 1.4}]
    assert spec_v2_host.crossing(line, 1.2) == pytest.approx(2.0)
    assert spec_v2_host.crossing(line, 1.5) is None


def hardware_h200():
    from experiments.spec_v2 import hardware

    return hardware("h200")
