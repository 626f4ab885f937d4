"""`python -m workbench serve-bench` runs end to end on the CPU with tiny models."""

from __future__ import annotations

import json

from workbench.__main__ import main


def test_serve_bench_cpu_smoke(tmp_path, capsys, tiny_dir, drafter_dir):
    """Both setups (a random preset with the oracle, a toy folder with its drafter): every
    row lossless, the JSON, the markdown table and one trace per run under --out."""
    toy = tmp_path / "toy"
    toy.mkdir()
    (toy / "target").symlink_to(tiny_dir)
    (toy / "dflash-b16").symlink_to(drafter_dir)
    out = tmp_path / "bench"
    rc = main(["serve-bench", "--target", "random:tiny", "--device", "cpu", "--concurrency",
               "1,3", "--prompt-len", "12", "--max-new-tokens", "20", "--block-size", "8",
               "--requests-per-client", "2", "--toy", str(toy), "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "serve_bench.json").read_text())
    assert doc["meta"]["git_sha"] and doc["meta"]["gpu"]
    rows = doc["rows"]
    assert {(r["setup"], r["concurrency"], r["method"], r["mode"]) for r in rows} == {
        (s, c, m, mode)
        for s, methods in (("tiny", ("none", "oracle")), ("toy", ("none", "dflash")))
        for c in (1, 3) for m in methods for mode in ("sync", "overlap")}
    for r in rows:
        assert r["lossless"] and r["throughput_tok_s"] > 0
        assert 0 < r["tpot_ms"] <= r["tpot_p99_ms"]
        assert 0 <= r["gpu_idle_fraction"] < 1 and 0 <= r["round_idle_fraction"] < 1
        assert r["host_ms_per_step"] > 0 and r["requests"] == max(2 * r["concurrency"], 4)
        assert r["discarded_rows"] == 0 if r["mode"] == "sync" else r["discarded_rows"] > 0
    assert {(q["setup"], q["method"]) for q in doc["ratios"]} == {
        ("tiny", "none"), ("tiny", "oracle"), ("toy", "none"), ("toy", "dflash")}
    setups = doc["setups"]
    assert setups["tiny"]["model"]["num_layers"] > 0 and setups["toy"]["drafter"]["layers"] == 2
    assert len(setups["tiny"]["oracle_survival"]) == 7
    assert len(list((out / "traces").glob("*.json"))) == len(rows)
    table = (out / "serve_bench.md").read_text()
    assert table.count("| toy |") == 8 + 4 and "overlap / sync" in table
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]


def test_serve_bench_open_loop(capsys):
    from workbench.serve.bench import run

    doc = run(["--target", "random:tiny", "--device", "cpu", "--concurrency", "2",
               "--prompt-len", "8", "--max-new-tokens", "12", "--block-size", "4", "--tau", "2.5",
               "--methods", "oracle:tau=2.5,shadow=true;dflash:random=tiny,block_size=4",
               "--modes", "overlap", "--rate", "500",
               "--spread", "0.5", "--no-fused-qk", "--fused-merge"])
    assert [(r["method"], r["lossless"]) for r in doc["rows"]] == [("oracle", True),
                                                                    ("dflash", True)]
    assert doc["meta"]["engine_options"]["fused_qk"] is False  # the shared flags, stamped
    assert doc["meta"]["engine_options"]["fused_merge"] is True
