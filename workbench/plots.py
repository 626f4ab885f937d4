"""PNG plots of simulation results (matplotlib, Agg backend: no display needed).

`plot_runs(runs, out_dir)` takes the runs of one simulate job, each a (label, point,
SimResult) triple where `point` is the swept concurrency or arrival rate (None for a single
run), and writes:

- throughput.png: output tokens/s against the point, one line per method;
- latency.png: TTFT p50/p99 and TPOT p50 against the point;
- commit_hist.png: commit-length histograms (speculative runs, largest point);
- timeline.png: KV pool use and running batch over time (largest point of each method).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simulator.metrics import SimResult  # noqa: E402

Runs = list[tuple[str, float | None, SimResult]]


def _by_label(runs):
    out: dict[str, list] = {}
    for label, point, res in runs:
        out.setdefault(label, []).append((point, res))
    return out


def _xaxis(ax, runs, xlabel: str) -> None:
    ax.set_xlabel(xlabel)
    points = [p for _, p, _ in runs if p is not None]
    if points and max(points) / max(min(points), 1e-12) >= 8:
        ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)


def plot_throughput(runs: Runs, out: Path, xlabel: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in _by_label(runs).items():
        x = [p for p, _ in pts]
        ax.plot(x, [r.summary["throughput"]["output_tok_s"] for _, r in pts], "o-", label=label)
    _xaxis(ax, runs, xlabel)
    ax.set_ylabel("output tokens / s")
    ax.legend()
    return _save(fig, out / "throughput.png")


def plot_latency(runs: Runs, out: Path, xlabel: str) -> Path:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, pts in _by_label(runs).items():
        x = [p for p, _ in pts]
        for q, style in (("p50", "o-"), ("p99", "x--")):
            a1.plot(x, [1e3 * (r.summary["ttft_s"][q] or np.nan) for _, r in pts], style,
                    label=f"{label} {q}")
        a2.plot(x, [1e3 * (r.summary["tpot_s"]["p50"] or np.nan) for _, r in pts], "o-",
                label=label)
    a1.set_ylabel("TTFT (ms)")
    a2.set_ylabel("TPOT p50 (ms)")
    for ax in (a1, a2):
        _xaxis(ax, runs, xlabel)
        ax.legend(fontsize=8)
    return _save(fig, out / "latency.png")


def _last_per_label(runs):
    return {label: pts[-1][1] for label, pts in _by_label(runs).items()}


def plot_commit_hist(runs: Runs, out: Path) -> Path | None:
    spec = {k: r for k, r in _last_per_label(runs).items() if r.summary["block_size"] > 1}
    if not spec:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(spec)
    for i, (label, r) in enumerate(spec.items()):
        hist = np.asarray(r.summary["speculation"]["commit_hist"], dtype=float)
        frac = hist / max(hist.sum(), 1)
        ax.bar(np.arange(len(hist)) + i * width, frac, width,
               label=f"{label} (tau {r.summary['speculation']['tau']:.2f})")
    ax.set_xlabel("commit length per round (bonus included)")
    ax.set_ylabel("fraction of request rounds")
    ax.legend()
    return _save(fig, out / "commit_hist.png")


def plot_timeline(runs: Runs, out: Path) -> Path:
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for label, r in _last_per_label(runs).items():
        ts = r.timeseries
        a1.plot(ts["t_s"], 100 * ts["kv_used_frac"], label=label)
        a2.plot(ts["t_s"], ts["running"], label=label)
    a1.set_ylabel("KV pool used (%)")
    a2.set_ylabel("running requests")
    a2.set_xlabel("simulated time (s)")
    for ax in (a1, a2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, out / "timeline.png")


def plot_runs(runs: Runs, out_dir: Path, xlabel: str = "concurrency") -> list[Path]:
    """Write every plot of a simulate job into out_dir; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot_timeline(runs, out_dir)]
    if len({p for _, p, _ in runs}) > 1:
        paths += [plot_throughput(runs, out_dir, xlabel), plot_latency(runs, out_dir, xlabel)]
    hist = plot_commit_hist(runs, out_dir)
    return paths + ([hist] if hist else [])


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
