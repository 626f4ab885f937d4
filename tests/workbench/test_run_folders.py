"""Run folders: unique per run, never a finished run's, atomic files, interrupted runs kept
and labelled (workbench/rundir.py, workbench/atomic.py, simulate's save after each run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.simulate as sim
from workbench.atomic import atomic_open, write_text
from workbench.config import SimulateConfig
from workbench.rundir import unique_dir

REPO = Path(__file__).resolve().parents[2]
SMALL = ("sweep.concurrency=[1,2]", "sweep.baseline=false", "output.plots=false",
         "workload.num_requests=4", "sweep.min_requests_per_client=0")


def _workbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)


def test_a_taken_folder_name_gets_the_next_free_suffix(tmp_path):
    (tmp_path / "12-00-00").mkdir()
    (tmp_path / "12-00-00-2").mkdir()
    got = unique_dir(str(tmp_path / "12-00-00"))
    assert got == str(tmp_path / "12-00-00-3") and Path(got).is_dir()
    assert unique_dir(str(tmp_path / "12-00-00")) == got  # the process keeps its answer


def test_an_atomic_write_cut_short_leaves_the_old_file_and_no_temporary(tmp_path):
    path = write_text(tmp_path / "summary.json", "old")
    with pytest.raises(KeyboardInterrupt), atomic_open(path) as f:
        f.write("half of the new")
        raise KeyboardInterrupt
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]


def test_two_runs_in_the_same_second_get_two_folders_and_a_rerun_is_refused(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "workbench", "simulate", *SMALL],
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    assert [p.wait(120) for p in procs] == [0, 0]
    folders = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    assert len(folders) == 2
    for folder in folders:
        assert json.loads((folder / "summary.json").read_text())["status"] == "complete"
    before = (folders[0] / "summary.json").read_bytes()
    proc = _workbench("simulate", *SMALL, f"hydra.run.dir={folders[0]}", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "already holds a run (summary.json)" in lines[0]
    assert (folders[0] / "summary.json").read_bytes() == before


def test_ctrl_c_keeps_the_finished_runs_and_says_how_to_run_the_rest(tmp_path, monkeypatch):
    real, calls = sim.simulator.run, []

    def run(cfg):
        calls.append(cfg)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(cfg)

    monkeypatch.setattr(sim.simulator, "run", run)
    app = SimulateConfig()
    app.sweep.concurrency, app.workload.num_requests = [1, 2, 4], 4
    app.sweep.min_requests_per_client, app.output.plots = 0, False
    name, runs = sim.plan_runs(app)
    saved = []
    done = sim.run_all(runs, False, lambda out: saved.append(len(out)))
    assert len(done) == 2 and saved == [1, 2]
    # runs 3..6 left: dflash at 4, then none at 1, 2, 4 (method-major order)
    assert sim.remaining(runs, done, name) == "'sweep.concurrency=[1,2,4]'"
    from omegaconf import OmegaConf

    sim.write_outputs(app, OmegaConf.structured(app), done, name, tmp_path, len(runs))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["runs_planned"] == 6
    assert len(summary["runs"]) == 2 and summary["meta"]["package_version"]


def test_report_labels_interrupted_and_unfinished_jobs(tmp_path):
    multirun = tmp_path / "mr"
    for job in ("0", "1"):
        proc = _workbench("simulate", *SMALL, f"hydra.run.dir={multirun / job}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    path = multirun / "1" / "summary.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "status": "interrupted"}))
    (multirun / "2" / ".hydra").mkdir(parents=True)
    (multirun / "2" / ".hydra" / "overrides.yaml").write_text("[]\n")
    proc = _workbench("report", str(multirun), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 (interrupted)" in proc.stdout and "0 (interrupted)" not in proc.stdout
    assert "interrupted jobs (their finished runs only): 1" in proc.stdout
    assert "no run finished (no summary.json): 2" in proc.stdout
    statuses = [line.split(",")[1] for line in
                (multirun / "report.csv").read_text().splitlines()[1:]]
    assert statuses == ["complete", "complete", "interrupted", "interrupted"]


def test_ctrl_c_in_a_real_run_ends_in_one_line_and_keeps_the_summary(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "simulate", "output.plots=false",
         "sweep.min_requests_per_client=60", f"hydra.run.dir={out}"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "summary.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    summary = json.loads((out / "summary.json").read_text())
    if summary["status"] == "complete":  # the sweep finished before the signal landed
        pytest.skip("the sweep finished before Ctrl-C")
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1, err
    kept = len(summary["runs"])
    assert lines[0].startswith(f"interrupted: kept {kept} of 14 runs in {out}")
    assert "sweep.min_requests_per_client=60 'sweep.concurrency=[" in lines[0]
    assert summary["runs_planned"] == 14 and 1 <= kept < 14
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.is_file()] == []


@pytest.mark.parametrize("argv, held", [
    (["serve-bench", "--device", "cpu"], "serve_bench.json"),
    (["serve-bench", "--device", "cpu"], "traces"),
    (["calibrate", "model=tiny,toy", "--quick", "--device", "cpu"], "toy.json"),
])
def test_an_out_folder_holding_results_is_refused_in_one_line(tmp_path, capsys, argv, held):
    from workbench.__main__ import main as workbench

    (tmp_path / held).mkdir() if held == "traces" else write_text(tmp_path / held, "earlier")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert workbench([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path} already holds results ({held})" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if held != "traces":
        assert (tmp_path / held).read_text() == "earlier"


def test_other_files_in_an_out_folder_are_left_beside(tmp_path):
    from workbench.calibrate.cli import ALL
    from workbench.errors import UserError, fresh_output
    from workbench.serve.bench import OUTPUTS

    write_text(tmp_path / "notes.txt", "mine")
    write_text(tmp_path / "qwen3-8b.json", "{}")
    fresh_output(tmp_path, OUTPUTS)
    fresh_output(tmp_path, ["toy.json"])
    with pytest.raises(UserError, match=r"holds results \(qwen3-8b\.json\)"):
        fresh_output(tmp_path, [f"{name}.json" for name in ALL])
