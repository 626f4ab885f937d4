"""`common` is the bottom layer: it imports with torch, triton, simpy and hydra blocked, and
imports none of the project's other packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = ("numerics", "buckets", "survival", "dspark_schedule", "stamps", "paths", "methods")


def test_common_imports_without_torch_simpy_hydra_or_project_packages():
    blocked = ("torch", "triton", "simpy", "hydra", "omegaconf")
    code = (
        "import sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        f"for m in {MODULES!r}: __import__('common.' + m)\n"
        "from common.stamps import stamp\n"
        "s = stamp()\n"
        "assert s['gpu'] is None and s['versions']['cuda'] is None, s\n"
        "ours = ('workbench', 'reference', 'kernels', 'simulator', 'toy', 'experiments')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ours]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
