"""Bad inputs end in one line naming the input and its accepted range; GPU-only commands on
a CPU say so in one line; installed copies stamp their own commit and never write into the
package (workbench/errors.py, common/stamps.py, common/paths.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common import paths, stamps
from simulator.acceptance import ReplayAcceptance
from simulator.params import ConfigError, SimConfig, SpecParams, validate
from workbench.__main__ import main as workbench
from workbench.errors import int_list, name_list, ranged

REPO = Path(__file__).resolve().parents[2]


def _one_line_error(capsys, argv: list[str], *parts: str) -> None:
    try:
        rc = workbench(argv)
    except SystemExit as e:  # argparse's errors exit (the console script returns it)
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


def test_types_name_the_value_and_the_range():
    assert ranged(int, 1, 256)("16") == 16 and ranged(float, 0, None, True)("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"0 is outside \[1, 256\]"):
        ranged(int, 1, 256)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="0 is not > 0"):
        ranged(float, 0, None, open_lo=True)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="'x' is not an integer"):
        ranged(int, 1)("x")
    with pytest.raises(argparse.ArgumentTypeError, match="nan is outside"):
        ranged(float, 0, 1)("nan")
    assert int_list(1, 64)(" 1, 4 ,16") == "1,4,16"
    with pytest.raises(argparse.ArgumentTypeError, match="holds no value"):
        int_list(1, 64)(",")
    with pytest.raises(argparse.ArgumentTypeError, match="one of sync, overlap"):
        name_list(("sync", "overlap"))("sync,fast")


@pytest.mark.parametrize("argv, parts", [
    (["serve-bench", "--concurrency", "0"], ("--concurrency: 0 is outside [1, 4096]",)),
    (["serve-bench", "--modes", "fast"], ("--modes", "sync, overlap")),
    (["serve-bench", "--tau", "9", "--block-size", "8"], ("--tau: 9 is above --block-size",)),
    (["serve-bench", "--spread", "2"], ("--spread: 2 is outside [0, 1]",)),
    (["serve-bench", "--rate", "-1"], ("--rate: -1 is not > 0",)),
    (["serve-bench", "--target", "random:nosuch", "--device", "cpu"], ("tiny", "qwen3-8b")),
    (["serve-bench", "--device", "cuda"], ("needs a CUDA GPU", "--device cpu")),
    (["calibrate"], ("needs a CUDA GPU", "--quick --device cpu")),
    (["calibrate", "model=nosuch", "--device", "cpu"], ("model=nosuch", "tiny-moe, toy")),
    (["calibrate", "--budget-s", "0"], ("--budget-s: 0 is not > 0",)),
    (["calibrate", "install", "nosuch.json"], ("no such table nosuch.json",)),
    (["validate", "run", "--device", "cuda"], ("needs a CUDA GPU", "validate run model=tiny")),
    (["validate", "nosuch"], ("'nosuch' is not a subcommand",)),
    (["report", ".", "--top", "-3"], ("--top: -3 is not >= 1",)),
    (["decode", "random:tiny", "--prompt", "hi", "--stop", ""], ("--stop ''",)),
    (["kernels-check", "nosuch"], ("unknown op nosuch",)),
])
def test_a_bad_input_is_one_line(capsys, monkeypatch, argv, parts):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["workbench"])
    _one_line_error(capsys, argv, *parts)


def test_serve_bench_defaults_fit_a_cpu(monkeypatch, capsys):
    import torch

    from workbench.serve.bench import _args, fit_machine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = _args([])
    assert fit_machine(args) == "cpu"
    assert (args.target, args.concurrency, args.prompt_len, args.max_new_tokens) == (
        "random:tiny", "1,4", 16, 24)
    assert "CPU smoke" in capsys.readouterr().err
    args = _args(["--prompt-len", "32"])
    fit_machine(args)
    assert args.prompt_len == 32 and args.max_new_tokens == 24


def test_version_and_help_into_a_closed_pipe():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "workbench", "--version"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("dflash-workbench ")
    piped = subprocess.run(f"{sys.executable} -m workbench report --help | head -1",
                           shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert piped.stdout.startswith("usage:") and "Traceback" not in piped.stderr


def test_simulate_bounds_the_request_count(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "workbench", "simulate",
                           "workload.concurrency=100000", f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "800,000 requests" in lines[0] and "above 200,000" in lines[0]
    assert "sweep.min_requests_per_client = 8" in lines[0]


def test_a_draft_vocabulary_above_the_targets_is_refused():
    tree = {"tree_tokens": 64, "draft_vocab_size": 200_000}
    cfg = SimConfig(spec=SpecParams(method="eagle", options=tree))
    with pytest.raises(ConfigError, match="draft_vocab_size = 200000 is above "
                                          "model.vocab_size = 151936"):
        validate(cfg)


def test_replayed_commit_lengths_outside_the_block_are_refused():
    ReplayAcceptance(2, 8, [np.array([1, 8, 3])])
    with pytest.raises(ConfigError, match=r"span \[1, 12\], outside \[1, spec.block_size = 8\]"):
        ReplayAcceptance(2, 8, [np.array([1, 12, 3])])


def test_an_installed_copy_stamps_its_build_commit_not_the_enclosing_repo(tmp_path,
                                                                         monkeypatch):
    built = tmp_path / "build_commit.txt"
    built.write_text("abc123\n")
    monkeypatch.delenv("GIT_SHA", raising=False)
    monkeypatch.setattr(stamps, "_own_checkout", lambda: False)
    monkeypatch.setattr(stamps, "BUILD_COMMIT", built)
    s = stamps.stamp()
    assert s["git_sha"] == "abc123" and s["git_dirty"] is None
    assert s["package_version"] == stamps.version("dflash-workbench")
    monkeypatch.setattr(stamps, "BUILD_COMMIT", tmp_path / "absent.txt")
    assert stamps.git_sha() is None


def test_an_installed_copy_writes_under_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "is_checkout", lambda: False)
    got = paths.tree_output(paths.ROOT / "experiments" / "validation", "--out-dir")
    assert got == tmp_path / "experiments" / "validation"
    got = paths.tree_output(paths.ROOT / "workbench" / "conf" / "calibration" / "h200", "--out")
    assert got == tmp_path / "conf" / "calibration" / "h200"
    monkeypatch.setattr(paths, "is_checkout", lambda: True)
    assert paths.tree_output(paths.ROOT / "x", "--out") == paths.ROOT / "x"


def test_serve_bench_json_says_interrupted_until_the_end(tmp_path):
    from workbench.serve.report import save

    result = {"meta": {}, "rows": []}
    save(result, str(tmp_path))
    assert json.loads((tmp_path / "serve_bench.json").read_text())["status"] == "interrupted"
    save(result, str(tmp_path), "complete")
    assert json.loads((tmp_path / "serve_bench.json").read_text())["status"] == "complete"


def test_validate_report_on_a_model_the_simulator_cannot_price(tmp_path, capsys):
    from workbench.validate.report import main

    measured = tmp_path / "validation-tiny.json"
    measured.write_text('{"model": "tiny"}')
    with pytest.raises(SystemExit) as e:
        main([str(measured)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "conf/model/tiny.yaml" in err and "qwen3-8b" in err
