"""`workbench calibrate-engine`: reading sglang.bench_serving JSONL and vllm bench serve JSON
(fixtures in those formats), one-line errors naming the file and the field, and a fit that
recovers the engine terms the runs were made with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import simulator
from workbench.calibrate.engine import _conf, main, sim_config
from workbench.calibrate.engine_results import BenchRun, ResultError, read

FIXTURES = Path(__file__).parents[1] / "data"


def test_reads_both_formats():
    plain, spec = read(FIXTURES / "sglang_bench_serving.jsonl")
    assert (plain.engine, plain.concurrency, plain.requests, plain.tau) == ("sglang", 4, 64, None)
    assert plain.prompt_tokens == 8192 / 64 and plain.output_tokens == 16384 / 64
    assert plain.output_tok_s == 1310.7
    assert spec.speculative and spec.tau == 3.71 and spec.concurrency == 16
    (v,) = read(FIXTURES / "vllm_bench_serve.json")
    assert (v.engine, v.concurrency, v.tau, v.output_tok_s) == ("vllm", 8, 4.62, 2685.9)


def test_missing_field_names_file_and_field(tmp_path):
    lines = (FIXTURES / "sglang_bench_serving.jsonl").read_text().splitlines()
    d = json.loads(lines[1])
    del d["output_throughput"]
    path = tmp_path / "r.jsonl"
    path.write_text(lines[0] + "\n" + json.dumps(d) + "\n")
    with pytest.raises(ResultError) as e:
        read(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "line 2" in msg
    assert "'output_throughput'" in msg


def test_wrong_format_is_one_line(tmp_path, capsys):
    path = tmp_path / "r.csv"
    path.write_text("concurrency,tok_s\n4,1300\n")
    assert main([str(path), "--name", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"hello": 1}))
    assert main([str(other), "--name", "x", "--out", str(tmp_path)]) == 2
    assert "'backend'" in capsys.readouterr().err


TRUTH = {"layer_overhead_s": 60e-6, "request_layer_overhead_s": 0.4e-6,
         "spec_round_s": 1.5e-3, "spec_request_s": 40e-6}


def _measured(c: int, tau: float | None) -> float:
    run = BenchRun("-", "sglang", c, 3 * c, 64.0, 96.0, 1.0, tau)
    engine = {**_conf("engine", "sglang_v1"), **TRUTH}
    cfg = sim_config(run, _conf("model", "toy"), _conf("hardware", "h200"), engine,
                     _conf("spec", "dflash"), "humaneval")
    return simulator.run(cfg).summary["throughput"]["output_tok_s"]


def _row(c: int, tau: float | None, fmt: str) -> dict:
    d = {"max_concurrency": c, "completed": 3 * c, "total_input_tokens": 64 * 3 * c,
         "total_output_tokens": 96 * 3 * c, "output_throughput": _measured(c, tau)}
    if fmt == "sglang":
        return {"backend": "sglang", **d, "accept_length": tau}
    return {"backend": "vllm", "model_id": "toy", **d,
            **({} if tau is None else {"spec_decode_acceptance_length": tau})}


def test_fit_recovers_the_terms_the_runs_were_made_with(tmp_path, capsys):
    sg = tmp_path / "sglang.jsonl"
    sg.write_text("\n".join(json.dumps(_row(c, None, "sglang")) for c in (2, 8)) + "\n")
    files = [sg]
    for i, c in enumerate((2, 8)):
        f = tmp_path / f"vllm_{i}.json"
        f.write_text(json.dumps(_row(c, 3.5, "vllm")))
        files.append(f)
    rc = main([*map(str, files), "--name", "mine", "--base", "sglang_v1", "--model", "toy",
               "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    prof = yaml.safe_load((tmp_path / "mine.yaml").read_text())
    assert prof["profile"] == "mine" and "sglang.jsonl" in prof["source"]
    assert prof["defaults"] == ["base_engine", "_self_"] and prof["mode"] == "sync"
    for name, value in TRUTH.items():
        assert prof[name] == pytest.approx(value, rel=0.05), name
    assert sum(", residual " in ln for ln in out.splitlines()) == 4
    assert "no residual degrees of freedom" in out  # 4 runs, 4 parameters
