"""Result files: JSON stamped with the git SHA and library versions, and per-request CSV.

Every JSON document written here carries a `meta` block (git commit and dirty flag, Python
and library versions, UTC time, the command line) so a number can always be traced back to
the code and command that produced it.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("numpy", "simpy", "hydra-core", "omegaconf", "matplotlib", "rich")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_sha() -> str | None:
    """HEAD of the repository, or None outside a git checkout."""
    return _git("rev-parse", "HEAD")


def version(pkg: str) -> str | None:
    """Installed version of distribution `pkg`, or None."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def stamp() -> dict[str, Any]:
    """Provenance of a result: code version, library versions, time, command."""
    versions = {"python": platform.python_version(), **{pkg: version(pkg) for pkg in PACKAGES}}
    status = _git("status", "--porcelain")
    return {
        "git_sha": git_sha(),
        "git_dirty": bool(status) if status is not None else None,
        "versions": versions,
        "utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "machine": {"cpus": _cpu_count(), "platform": platform.platform()},
    }


def _cpu_count() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write `payload` plus a `meta` stamp as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": stamp(), **_plain(payload)}, indent=2) + "\n")
    return path


def write_requests_csv(path: Path, runs: list[tuple[dict[str, Any], dict]]) -> Path:
    """One row per request of every run; `runs` pairs each run's labels with its records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = None
        for labels, records in runs:
            cols = list(records)
            if writer is None:
                writer = csv.writer(f)
                writer.writerow([*labels, *cols])
            arrays = [np.asarray(records[c]) for c in cols]
            for i in range(len(arrays[0]) if arrays else 0):
                writer.writerow([*labels.values(), *(_cell(a[i]) for a in arrays)])
    return path


def _cell(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return "" if not np.isfinite(v) else f"{float(v):.6g}"
    return v.item() if isinstance(v, np.generic) else v
