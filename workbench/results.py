"""Result files: JSON stamped with the git SHA and library versions, and per-request CSV,
each written atomically (a temporary file renamed over the target: workbench/atomic.py).

Every JSON document written here carries a `meta` block (common/stamps.py: git commit and
dirty flag, Python and library versions, GPU, UTC date, plus the command line) so a number
can always be traced back to the code and command that produced it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from common.stamps import command_line, stamp
from workbench.atomic import atomic_open


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
    """Write `payload` plus a `meta` stamp (the payload's own, if it has one) as indented JSON,
    atomically (workbench/atomic.py)."""
    meta = payload.get("meta") or stamp(command=command_line())
    text = json.dumps(_plain({"meta": meta, **payload}), indent=2) + "\n"
    with atomic_open(path) as f:
        f.write(text)
    return path


def write_requests_csv(path: Path, runs: list[tuple[dict[str, Any], dict]]) -> Path:
    """One row per request of every run; `runs` pairs each run's labels with its records
    (written atomically: a reader never sees a truncated file)."""
    with atomic_open(path, newline="") as f:
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


def setup_title(summary: dict[str, Any]) -> str:
    """What a simulation modelled, in one line: model, hardware, engine (and its profile),
    cost model (and the source of its numbers) from a run's summary, e.g. "qwen3-8b on h200,
    overlap engine, analytic roofline costs". `engine_profile` and `cost_source` are named
    when the summary carries them (the source up to its first colon: the table's file)."""
    replicas = summary.get("replicas") or 1
    where = f"{summary.get('hardware', '?')}" + (f" x {replicas}" if replicas > 1 else "")
    engine = f"{summary.get('engine_mode', '?')} engine"
    if summary.get("engine_profile"):
        engine += f" ({summary['engine_profile']})"
    costs = summary.get("cost_model") or "roofline"
    costs = f"{'analytic roofline' if costs == 'roofline' else costs} costs"
    if summary.get("cost_source"):
        costs += f" ({summary['cost_source'].split(':')[0]})"
    return f"{summary.get('model', '?')} on {where}, {engine}, {costs}"
