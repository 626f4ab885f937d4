"""The simulator runs on numpy and simpy only: importing and running it never loads torch
(nor hydra, which only the command line needs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_simulator_never_imports_torch_or_hydra():
    code = (
        "import sys, simulator\n"
        "from simulator.params import SimConfig\n"
        "cfg = SimConfig(); cfg.workload.num_requests = 4\n"
        "simulator.run(cfg)\n"
        "bad = [m for m in ('torch', 'hydra', 'omegaconf') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
