"""The prefill predictor: a launch-bound floor, then a line in tokens and attention pairs.

`Engine.prefill` (eager layers, wall seconds) of n requests of q new tokens each after kv
cached ones is predicted as

    t(n, q, kv) = max(floor, a + b * tokens + c * pairs),
    tokens = n * q,  pairs = n * q * (kv + (q + 1) / 2)  (causal query-key pairs),

not by interpolating the (n, q) grid: the time is a function of the work, and the grid cells
of equal work (n * q) lie on different rows and columns, so a multilinear interpolation
between them misses the kink where the floor ends. The shape of the data it fits: flat up
to about a thousand tokens (the launches and host work of the eager layers), then linear in
the tokens (weight matmuls) plus a term in query-key pairs (attention), which is why at
equal tokens a longer prompt is slower and a line in tokens alone fits worse. The fitted
coefficients and errors of each model are in the calibration documents
(benchmarks/calibration/README.md says how they are made).

The fit, on the table's cells only (held-out points are never seen): the cells are split
by their token count into small (the floor) and large (the line), at the split that gives
the least squared relative error of the whole predictor over every cell. The line is a
non-negative least-squares fit weighted by 1/seconds (relative errors, as scored) of
a, b, c over the large cells (a term that would come out negative is dropped: every
coefficient >= 0, so the prediction never decreases in n, q or kv). The floor is the fastest
small cell: a GPU timing errs one way only (a cold start or a slow variant reads slower,
nothing reads faster; the reasoning of `monotone_envelope`), and the small cells disagree
among themselves by more than the line's error. The switch is hard (a max): no cell lies
between 512 and 2048 tokens to resolve a smoother kink. kv: the cells are measured at
kv = 0; a chunk after cached context is charged its extra query-key pairs at the fitted c.
"""

from __future__ import annotations

import itertools

import numpy as np

TIE = 1e-12  # summed squared relative error: a fit no better by this keeps the simpler one


def features(n, q, kv) -> np.ndarray:
    """(..., 3): 1, tokens n * q, causal query-key pairs n * q * (kv + (q + 1) / 2)."""
    n, q, kv = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (n, q, kv)))
    return np.stack([np.ones(n.shape), n * q, n * q * (kv + (q + 1) / 2)], axis=-1)


def nonneg_lsq(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Coefficients >= 0 minimising sum(((x @ coef - s) / s)^2): the best unconstrained fit
    over every subset of the columns whose coefficients all come out >= 0 (exact for a
    handful of columns)."""
    w = 1.0 / s
    best, coef = np.inf, np.zeros(x.shape[1])
    for k in range(1, min(x.shape[1], len(s)) + 1):
        for cols in itertools.combinations(range(x.shape[1]), k):
            c = np.linalg.lstsq(x[:, cols] * w[:, None], s * w, rcond=None)[0]
            if (c < 0).any():
                continue
            full = np.zeros(x.shape[1])
            full[list(cols)] = c
            err = float((((x @ full - s) * w) ** 2).sum())
            if err < best - TIE:
                best, coef = err, full
    return coef


def fit_floor_line(n, q, kv, s) -> tuple[float, np.ndarray, float]:
    """(floor seconds, coefficients a, b, c, smallest token count of the line's cells) of
    the cells (n, q, kv) -> s seconds; see the module docstring."""
    n, q, kv, s = (np.asarray(v, dtype=np.float64).ravel() for v in (n, q, kv, s))
    tokens, x = n * q, features(n, q, kv)
    best = (np.inf, 0.0, np.zeros(3), 0.0)
    for split in np.unique(tokens):
        small = tokens < split
        if (~small).sum() < min(2, len(s)):
            continue
        floor = float(s[small].min()) if small.any() else 0.0
        coef = nonneg_lsq(x[~small], s[~small])
        err = float((((np.maximum(floor, x @ coef) - s) / s) ** 2).sum())
        if err < best[0] - TIE:
            best = (err, floor, coef, float(split))
    return best[1], best[2], best[3]


class PrefillFit:
    """The prefill predictor over a table {"axes": {n, q, kv}, "seconds"} (the module
    docstring). Same reading interface as `Table`: `raw` (the cells as measured, NaN:
    unmeasured), `axes`/`names`, `measured`, `values` (the fit at the grid), `lowered` (0:
    no envelope), and `(n, q, kv)` -> seconds."""

    def __init__(self, axes: dict[str, list[float]], seconds, name: str = "prefill"):
        self.name, self.names = name, list(axes)
        self.axes = [np.asarray(v, dtype=np.float64) for v in axes.values()]
        self.raw = np.asarray(seconds, dtype=np.float64).reshape([len(a) for a in self.axes])
        ok = np.isfinite(self.raw)
        self.measured = bool(ok.any())
        self.lowered = 0
        self.floor_s, self.coef, self.split_tokens = 0.0, np.zeros(3), 0.0
        if self.measured:
            grid = np.meshgrid(*self.axes, indexing="ij")
            self.floor_s, self.coef, self.split_tokens = fit_floor_line(
                *(g[ok] for g in grid), self.raw[ok])
        self.values = self(*np.meshgrid(*self.axes, indexing="ij"))

    @classmethod
    def from_json(cls, name: str, d: dict) -> PrefillFit:
        seconds = [np.nan if v is None else v for v in np.ravel(
            np.asarray(d["seconds"], dtype=object))]
        return cls(d["axes"], np.array(seconds, dtype=np.float64), name)

    def __call__(self, n, q, kv=0.0) -> np.ndarray | float:
        """Wall seconds of a prefill of n requests, q new tokens each, after kv cached."""
        out = np.maximum(self.floor_s, features(n, q, kv) @ self.coef)
        return float(out) if out.ndim == 0 else out

    def kink_tokens(self, q: float) -> float:
        """Tokens n * q (at kv = 0, q per request) where the line reaches the floor."""
        a, b, c = self.coef
        slope = b + c * (q + 1) / 2
        return float((self.floor_s - a) / slope) if slope > 0 else float("inf")

    def describe(self) -> str:
        """One sentence: the fitted floor, line and kink, in ms, us and ns."""
        a, b, c = self.coef
        return (f"The prefill is max({1e3 * self.floor_s:.1f} ms, {1e3 * a:.1f} ms + "
                f"{1e6 * b:.1f} us x tokens + {1e9 * c:.2f} ns x query-key pairs), fitted to "
                f"the table's cells (line on those of >= {self.split_tokens:g} tokens; floor "
                f"the fastest below), the floor ending near "
                f"{self.kink_tokens(512):.0f} tokens at 512 per request "
                "(`PrefillFit` in simulator/prefill_fit.py).")
