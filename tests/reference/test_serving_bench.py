"""`python -m workbench serve-bench` runs end to end on the CPU with a tiny preset."""

from __future__ import annotations

import json
import time

from workbench.__main__ import main


def test_serve_bench_cpu_smoke(tmp_path, capsys):
    out, traces = tmp_path / "bench.json", tmp_path / "traces"
    start = time.perf_counter()
    rc = main(["serve-bench", "--target", "random:tiny", "--device", "cpu", "--concurrency",
               "1,3", "--prompt-len", "12", "--max-new-tokens", "20", "--block-size", "8",
               "--requests-per-client", "2", "--out", str(out), "--trace-dir", str(traces)])
    assert rc == 0 and time.perf_counter() - start < 30
    doc = json.loads(out.read_text())
    assert doc["meta"]["git_sha"] and doc["env"]["gpu"] == "cpu"
    rows = doc["rows"]
    assert {(r["concurrency"], r["method"], r["mode"]) for r in rows} == {
        (c, m, mode) for c in (1, 3) for m in ("ar", "oracle") for mode in ("sync", "overlap")}
    for r in rows:
        assert r["lossless"] and r["throughput_tok_s"] > 0 and r["tpot_ms"] > 0
        assert 0 <= r["gpu_idle_fraction"] < 1 and r["host_ms_per_step"] > 0
        assert r["discarded_rows"] == 0 if r["mode"] == "sync" else r["discarded_rows"] > 0
    assert {q["method"] for q in doc["ratios"]} == {"ar", "oracle"}
    assert len(list(traces.glob("*.json"))) == len(rows)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]


def test_serve_bench_open_loop(capsys):
    from workbench.serve_bench import run

    doc = run(["--target", "random:tiny", "--device", "cpu", "--concurrency", "2",
               "--prompt-len", "8", "--max-new-tokens", "12", "--block-size", "4", "--tau", "2.5",
               "--methods", "oracle,dflash", "--modes", "overlap", "--rate", "500"])
    assert [(r["method"], r["lossless"]) for r in doc["rows"]] == [("oracle", True),
                                                                    ("dflash", True)]
