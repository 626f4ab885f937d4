"""Measured timing tables (conf/calibration/<hardware>/<model>.json) and their predictors.

A table holds one operation's seconds on a rectilinear grid (axes such as requests `n`,
tokens per request `q`, committed context `kv`). `Table.__call__` interpolates multilinearly
between grid points and extrapolates linearly beyond the ends, so a prediction at a grid
point is the measurement itself, unless the measurement breaks monotonicity: every axis is
an amount of work (requests, tokens, context, rows), so the measured grid is first replaced
by its lower monotone envelope (`monotone_envelope`: a point that reads slower than a larger
workload was measured in a slow state, and the larger workload bounds it). Cells left
unmeasured (out of memory, out of time) are filled before use by least-squares lines along
one axis at a time (`fill_gaps`): the regression only covers gaps. The prefill table is read
through a fit instead (`PrefillFit`, simulator/prefill_fit.py: a launch-bound floor, then a
line in tokens and attention pairs), which `build_tables` gives the simulator and the
held-out scores alike. `heldout_report` scores a table on measurements that were not used
to build it. Pure numpy, so the GPU machine (no simpy) can fit and score its tables.

`load_calibration(path, model)` reads a file and refuses one whose recorded model shapes
differ from the model being simulated.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.buckets import bucket
from common.paths import conf_dir
from simulator.params import ConfigError, ModelParams
from simulator.prefill_fit import PrefillFit

FORMAT = 1
SHAPE_FIELDS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                "intermediate_size", "vocab_size", "dtype_bytes")
REPO_CONF = conf_dir() / "calibration"


def _fill_line(values: np.ndarray, x: np.ndarray) -> bool:
    """Fill NaNs of one line in place with the least-squares line of its finite points."""
    ok = np.isfinite(values)
    if ok.all() or ok.sum() < 2:
        return False
    slope, icpt = np.polyfit(x[ok], values[ok], 1)
    values[~ok] = np.maximum(icpt + slope * x[~ok], values[ok].min())
    return True


def monotone_envelope(seconds: np.ndarray) -> np.ndarray:
    """The largest grid that is non-decreasing along every axis and nowhere above `seconds`.

    seconds: any shape, seconds per grid cell, NaN where unmeasured (stays NaN, and bounds
    nothing). Each cell becomes the minimum over the cells at least as large on every axis
    (a reverse cumulative minimum along each axis in turn): time(n) = min over n' >= n of
    measured(n'), likewise along q, kv, rows or tokens. Why: every axis of a table is an
    amount of work, and more work on the same hardware is never faster. The errors of a GPU
    timing are one-sided: a cold start (clocks ramping, first compilation or autotuning) or a
    poor compiled variant of a shape makes a point slower than the hardware runs it, nothing
    makes it faster; so when a smaller workload reads slower than a larger one, the smaller
    one is the wrong measurement and the larger workload's time is its best bound. A
    monotone grid is returned unchanged.
    """
    a = np.asarray(seconds, dtype=np.float64)
    out = np.where(np.isfinite(a), a, np.inf)
    for axis in range(out.ndim):
        out = np.flip(np.minimum.accumulate(np.flip(out, axis), axis=axis), axis)
    return np.where(np.isfinite(a), out, np.nan)


def settle(monotone: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """The grid the predictor reads: measured cells from `monotone` (their envelope, NaN where
    unmeasured), gaps from `filled` raised to at least every measured cell of less work, then
    enveloped again. Monotone along every axis, and a regression guess never lowers a
    measurement (each gap is at least every measured cell below it)."""
    ok = np.isfinite(monotone)
    low = np.where(ok, monotone, -np.inf)
    for axis in range(low.ndim):
        low = np.maximum.accumulate(low, axis=axis)
    return monotone_envelope(np.where(ok, monotone, np.maximum(filled, low)))


def fill_gaps(seconds: np.ndarray, axes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(filled copy, mask of filled cells): NaN cells from linear fits along the last axis
    first (context length, where time is near-linear), then the earlier axes."""
    out = np.array(seconds, dtype=np.float64)
    missing = ~np.isfinite(out)
    for _ in range(out.ndim):
        for axis in reversed(range(out.ndim)):
            moved = np.moveaxis(out, axis, -1)  # a view: fills write through
            for idx in np.ndindex(moved.shape[:-1]):
                _fill_line(moved[idx], axes[axis])
        if np.isfinite(out).all():
            break
    if not np.isfinite(out).all():
        out[~np.isfinite(out)] = np.nanmax(out) if np.isfinite(out).any() else 0.0
    return out, missing


class Table:
    """Multilinear interpolation (linear extrapolation) of seconds over named axes.

    `raw` holds the measurements as recorded (NaN: unmeasured), `monotone` their envelope,
    `values` the grid the predictor reads: that envelope with its gaps filled by regression
    (`settle`), so predictions never decrease along any axis. `lowered` counts the measured
    cells the envelope changed.
    """

    def __init__(self, axes: dict[str, list[float]], seconds, name: str = ""):
        self.name, self.names = name, list(axes)
        self.axes = [np.asarray(v, dtype=np.float64) for v in axes.values()]
        for n, a in zip(self.names, self.axes, strict=True):
            if a.size == 0 or np.any(np.diff(a) <= 0):
                raise ConfigError(f"calibration table {name}: axis {n} must increase: {a}")
        grid = np.asarray(seconds, dtype=np.float64).reshape([len(a) for a in self.axes])
        self.raw = grid
        self.measured = bool(np.isfinite(grid).any())  # False: no point at all (budget)
        self.monotone = monotone_envelope(grid)
        filled, self.filled = fill_gaps(self.monotone, self.axes)
        self.values = settle(self.monotone, filled)

    @property
    def lowered(self) -> int:
        """How many measured cells the monotone envelope lowered."""
        return int((np.isfinite(self.raw) & (self.values < self.raw)).sum())

    @classmethod
    def from_json(cls, name: str, d: dict) -> Table:
        seconds = np.array([np.nan if v is None else v for v in np.ravel(
            np.asarray(d["seconds"], dtype=object))], dtype=np.float64)
        return cls(d["axes"], seconds, name)

    def __call__(self, *coords) -> np.ndarray | float:
        """Seconds at the given coordinates (scalars or broadcastable arrays)."""
        xs = np.broadcast_arrays(*[np.asarray(c, dtype=np.float64) for c in coords])
        lo, w = [], []
        for x, a in zip(xs, self.axes, strict=True):
            if a.size == 1:
                lo.append(np.zeros(x.shape, dtype=np.int64))
                w.append(np.zeros(x.shape))
                continue
            i = np.clip(np.searchsorted(a, x, side="right") - 1, 0, a.size - 2)
            lo.append(i)
            w.append((x - a[i]) / (a[i + 1] - a[i]))
        out = np.zeros(xs[0].shape)
        for corner in np.ndindex(*([2] * len(xs))):
            weight = np.ones(xs[0].shape)
            idx = []
            for bit, i, wt, a in zip(corner, lo, w, self.axes, strict=True):
                if a.size == 1 and bit:
                    weight = weight * 0.0
                    idx.append(i)
                    continue
                weight = weight * (wt if bit else 1.0 - wt)
                idx.append(i + bit)
            out = out + weight * self.values[tuple(idx)]
        out = np.maximum(out, 0.0)
        return float(out) if out.ndim == 0 else out


def build_tables(doc: dict) -> dict[str, Table | PrefillFit]:
    """Every table of a calibration document, the draft block's gaps filled structurally.

    The DFlash draft layers have the target's layer shapes and attend to the same context
    plus the block, so draft(n, B, kv) ~ lm_head(n (B-1)) + (L_draft / L_target) *
    target(n, B, kv) (measured/structural within ~10% on every measured point of qwen3-8b and
    llama-3.1-8b). An unmeasured draft cell is that structural value times the measured ratio
    at the nearest measured request count (same B and kv; else the median ratio, else 1):
    the plain per-axis regression cannot see that the draft's cost grows with n * B.
    Ratios and kept cells come from the draft's monotone envelope, gaps settled as in `Table`.
    The prefill is a `PrefillFit` (floor, then tokens and attention pairs), not a `Table`.
    """
    built = {k: (PrefillFit if k == "prefill" else Table).from_json(k, v)
             for k, v in doc["tables"].items()}
    draft, target, head = built.get("draft"), built.get("target"), built.get("lm_head")
    if draft is None or target is None or head is None or not target.measured:
        return built
    share = doc["drafter"]["num_layers"] / doc["model"]["num_layers"]
    n, b, kv = np.meshgrid(*draft.axes, indexing="ij")
    structural = head(n * (b - 1)) + share * target(n, b, kv)
    ratio = draft.monotone / structural
    ok = np.isfinite(ratio)
    fill = np.full(ratio.shape, float(np.median(ratio[ok])) if ok.any() else 1.0)
    for idx in np.ndindex(ratio.shape[1:]):  # the nearest measured request count, same B, kv
        line = ratio[(slice(None), *idx)]
        seen = np.flatnonzero(np.isfinite(line))
        if seen.size:
            near = seen[np.abs(np.arange(line.size)[:, None] - seen[None, :]).argmin(axis=1)]
            fill[(slice(None), *idx)] = line[near]
    draft.values = settle(draft.monotone, fill * structural)
    draft.measured = True
    return built


def heldout_report(table: Table, points: list[dict]) -> dict:
    """Absolute relative error of `table` on held-out measurements {"at": [...], "s": t}."""
    if not points:
        return {"points": 0, "median_pct": None, "p90_pct": None, "max_pct": None}
    err = np.array([abs(table(*p["at"]) - p["s"]) / p["s"] for p in points]) * 100
    return {"points": len(points), "median_pct": float(np.median(err)),
            "p90_pct": float(np.percentile(err, 90)), "max_pct": float(err.max())}


def round_gpu_s(t: dict[str, Table], buckets: list[int], n: int, block: int,
                kv: float) -> float:
    """Device seconds of one engine round of n requests at mean context kv, as the engine
    runs it: padded to the graph bucket (padding rows carry no context); at block 1 (plain
    decoding: nothing drafted) the target forward plus LM head, above it DFlash's round,
    which adds the draft block and the injection."""
    nb = bucket(n, buckets)
    kv_eff = kv * n / nb
    if block == 1:
        return float(t["target"](nb, 1, kv_eff) + t["lm_head"](nb))
    rows = nb * block
    return float(t["draft"](nb, block, kv_eff) + t["target"](nb, block, kv_eff)
                 + t["lm_head"](rows) + t["inject"](rows))


def table_path(name: str) -> Path:
    """A table name (`h200/qwen3-8b`) or a path to a JSON file."""
    p = Path(name)
    if p.suffix == ".json":
        return p
    return REPO_CONF / f"{name}.json"


def check_model(doc: dict, model: ModelParams, where: str) -> None:
    """Refuse a table measured on other model shapes than `model`'s."""
    rec = doc.get("model", {})
    bad = [f"{k}: table {rec.get(k)!r} vs model {getattr(model, k)!r}" for k in SHAPE_FIELDS
           if rec.get(k) != getattr(model, k)]
    if bad:
        raise ConfigError(f"calibration table {where} was measured on model "
                          f"{rec.get('name')!r}, not on model.{model.name}'s shapes ("
                          + "; ".join(bad) + ")")


def load_calibration(name: str, model: ModelParams) -> dict:
    """The calibration document `name`, checked against `model`, with its tables built."""
    path = table_path(name)
    if not path.is_file():
        raise ConfigError(f"engine.calibration = {name!r}: {path} not found (run "
                          "`python -m workbench calibrate`, see benchmarks/calibration/)")
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ConfigError(f"calibration table {path}: format {doc.get('format')!r}, "
                          f"expected {FORMAT}")
    check_model(doc, model, str(path))
    doc["built"] = build_tables(doc)
    doc["path"] = str(path)
    return doc
