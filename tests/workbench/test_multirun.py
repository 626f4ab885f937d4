"""Multirun past one process: the report command, and the Ray launcher against a local head.

The Ray test starts its own head (`ray start --head --block`) on 127.0.0.1 with free ports and
a temporary folder, runs a 2-job multirun through `hydra/launcher=ray_cluster`, and stops the
head by signalling the process it started (everything it spawned follows it); Ray's local
mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 on Linux) binds every server to the loopback.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from workbench.report import choose_x, load_jobs, main, rows_of

REPO = Path(__file__).resolve().parents[2]
OVERRIDES = ("experiment=smoke", "spec.block_size=4,8")
TIMING = ("wall_s", "sim_requests_per_wall_s")  # host wall-clock, not simulated results


def _workbench(*args: str, env: dict | None = None, timeout: int = 180):
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def basic(tmp_path_factory) -> Path:
    """A 2-job multirun (B = 4, 8) through Hydra's basic launcher, in this process's order."""
    out = tmp_path_factory.mktemp("basic")
    proc = _workbench("simulate", "--multirun", *OVERRIDES, f"hydra.sweep.dir={out}")
    assert proc.returncode == 0, proc.stderr
    return out


def _runs(folder: Path, job: str) -> tuple[dict, list[dict]]:
    doc = json.loads((folder / job / "summary.json").read_text())
    return doc["config"], [{k: v for k, v in r.items() if k not in TIMING} for r in doc["runs"]]


def test_report_writes_one_row_per_run_with_its_overrides(basic, tmp_path):
    proc = _workbench("report", str(basic), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / "report.csv").open() as f:
        rows = list(csv.DictReader(f))
    expected = {}
    for job in ("0", "1"):
        config, runs = _runs(basic, job)
        for run in runs:
            expected[(job, run["label"], str(run["concurrency"]))] = (
                str(config["spec"]["block_size"]),
                run["engine_mode"],
                run["throughput"]["output_tok_s"],
                run["goodput"]["requests_s"],
            )
    got = {
        (r["job"], r["method"], r["point_value"]): (
            r["spec.block_size"],
            r["engine_mode"],
            float(r["output_tok_s"]),
            float(r["goodput_rps"]),
        )
        for r in rows
    }
    assert len(rows) == len(expected) == 8 and got == expected
    assert {r["experiment"] for r in rows} == {"smoke"}
    table = proc.stdout
    assert "block_size" in table and "overlap" in table and "dflash B=8" in table
    assert "experiment=smoke" in table  # shared overrides are the caption
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert not (tmp_path / "search.json").exists()


def test_report_picks_the_swept_variable_and_names_bad_input(basic, tmp_path, capsys):
    rows, keys, varying = rows_of(load_jobs(basic))
    assert varying == ["spec.block_size"] and keys == ["experiment", "spec.block_size"]
    assert choose_x(rows, varying) == "point_value"  # each job sweeps concurrency 1, 4
    one_point = [r for r in rows if r["point_value"] == 4]
    assert choose_x(one_point, varying) == "spec.block_size"
    assert main([str(basic), "--out", str(tmp_path), "--x", "spec.block_size"]) == 0
    assert main([str(basic), "--out", str(tmp_path), "--x", "engine.mode"]) == 2
    assert main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "--x = engine.mode is not one of point, experiment, spec.block_size" in err
    assert "holds no job" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head on 127.0.0.1 for this test only: (address, env for its clients)."""
    pytest.importorskip(
        "hydra_plugins.hydra_ray_launcher",
        reason="hydra-ray-launcher (the test extra) is not installed",
    )
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths must stay < 108 bytes
    log = open(Path(temp) / "head.log", "w")
    head = subprocess.Popen(
        [
            sys.executable,  # the `ray` command of this interpreter, wherever PATH points
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--object-store-memory=100000000",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Ray head did not start: {Path(temp, 'head.log').read_text()}")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        head.send_signal(signal.SIGTERM)  # the head drains, then stops what it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # stragglers of the head's own group
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=10)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_launcher_runs_the_multirun_as_the_basic_launcher_does(basic, ray_head, tmp_path):
    address, env = ray_head
    proc = _workbench(
        "simulate",
        "--multirun",
        "hydra/launcher=ray_cluster",
        *OVERRIDES,
        f"hydra.sweep.dir={tmp_path}",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "Ray Launcher is launching 2 jobs" in log and address in log
    assert "(_run_job pid=" in log  # the jobs' output comes back from Ray workers
    for job in ("0", "1"):
        assert _runs(tmp_path, job) == _runs(basic, job)
