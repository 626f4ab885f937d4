"""A synthetic calibration table whose every predictor is multilinear in its axes (so the
interpolation is exact everywhere), for tests of the calibrated cost model and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BUCKETS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256]
TOY = dict(name="toy", hidden_size=256, num_layers=6, num_heads=4, num_kv_heads=2, head_dim=64,
           intermediate_size=768, vocab_size=4096, tie_embeddings=False, dtype_bytes=2)
HOST = {"none": {"a_s": 2e-4, "b_s": 1e-5}, "dflash": {"a_s": 3e-4, "b_s": 2e-5}}


def target_s(n, q, kv):
    return 1e-3 + 2e-5 * n * q + 1e-9 * n * kv + 1e-10 * n * q * kv


def draft_s(n, b, kv):
    return 4e-4 + 1e-5 * n * b + 5e-10 * n * kv


def lm_head_s(rows):
    return 1e-4 + 1e-6 * rows


def inject_s(tokens):
    return 5e-5 + 2e-7 * tokens


def prefill_s(n, q, kv):
    return 2e-3 + 1e-6 * n * q + 1e-10 * n * q * kv


def _table(fn, **axes) -> dict:
    grids = np.meshgrid(*[np.array(v, dtype=float) for v in axes.values()], indexing="ij")
    return {"axes": axes, "seconds": fn(*grids).tolist()}


def write_table(path: Path, model: dict | None = None, hardware: str = "h200") -> Path:
    """Write the synthetic table (toy shapes unless `model` is given) to `path`."""
    n = [1, 4, 16, 64]
    doc = {
        "format": 1, "model": dict(model or TOY),
        "drafter": {"num_layers": 2, "block_size": 16, "target_layer_ids": [1, 2, 3],
                    "block_sizes": [4, 8, 16]},
        "hardware": {"name": hardware, "gpu": "synthetic", "driver": None},
        "engine": {"cuda_graphs": True, "compile": True, "buckets": BUCKETS},
        "git_sha": None, "date": "synthetic",
        "tables": {
            "target": _table(target_s, n=n, q=[1, 2, 4, 8, 16], kv=[128, 512, 2048]),
            "draft": _table(draft_s, n=n, block=[4, 8, 16], kv=[128, 2048]),
            "lm_head": _table(lm_head_s, rows=[1, 16, 256, 1024]),
            "inject": _table(inject_s, tokens=[1, 64, 4096]),
            "prefill": _table(prefill_s, n=n, q=[16, 128, 512], kv=[0]),
        },
        "host": HOST,
        "report": {"target": {"points": 2, "median_pct": 1.0, "p90_pct": 2.0, "max_pct": 2.0}},
    }
    path.write_text(json.dumps(doc))
    return path
