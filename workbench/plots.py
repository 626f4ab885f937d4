"""PNG plots of simulation results (matplotlib, Agg backend: no display needed).

`plot_runs(runs, out_dir)` takes the runs of one simulate job, each a (label, point,
SimResult) triple where `point` is the swept concurrency or arrival rate (None for a single
run), and writes:

- throughput.png: output tokens/s against the point, one line per method;
- latency.png: TTFT p50/p99 and TPOT p50 against the point;
- commit_hist.png: commit-length histograms (speculative runs, last sweep point);
- timeline.png: KV pool use and running batch over time (last sweep point of each method).

Every figure is titled with the model, hardware, engine and cost model
(`workbench.results.setup_title`); the two that show one point of the sweep say which. A
method keeps its colour in every panel and every job (`method_colour`: the method's colour
in the common table of method names, common/methods.py).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from common.methods import NAMES  # noqa: E402
from simulator.metrics import SimResult  # noqa: E402
from workbench.atomic import atomic_path
from workbench.results import setup_title  # noqa: E402

Runs = list[tuple[str, float | None, SimResult]]
SPARE = ("tab:pink", "tab:olive", "tab:cyan")  # labels that name no method
POINT_NAMES = {"concurrency": "c = {:g}", "rate_rps": "{:g} req/s"}


def method_colour(label: str) -> str:
    """The colour of a run label such as "dflash B=16" (its method is the first word)."""
    method = label.split()[0]
    if method in NAMES:
        return NAMES[method].colour
    return SPARE[sum(map(ord, method)) % len(SPARE)]


def _by_label(runs):
    out: dict[str, list] = {}
    for label, point, res in runs:
        out.setdefault(label, []).append((point, res))
    return out


def _title(fig, runs: Runs, point_name: str, point: float | None = None) -> None:
    """The setup line; with `point`, a second line naming the one point the figure shows."""
    title = setup_title(runs[0][2].summary)
    if point is not None:
        where = POINT_NAMES.get(point_name, point_name + " = {:g}").format(point)
        several = len({p for _, p, _ in runs}) > 1
        title += f"\nlast sweep point ({where})" if several else f"\n{where}"
    fig.suptitle(title, fontsize=9)


def _xaxis(ax, runs, xlabel: str) -> None:
    ax.set_xlabel(xlabel)
    points = [p for _, p, _ in runs if p is not None]
    if points and max(points) / max(min(points), 1e-12) >= 8:
        ax.set_xscale("log", base=2)
        ticks = sorted(set(points))  # the swept values themselves, not powers of two
        ax.set_xticks(ticks, [f"{p:g}" for p in ticks])
        ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def plot_throughput(runs: Runs, out: Path, xlabel: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4.3))
    for label, pts in _by_label(runs).items():
        x = [p for p, _ in pts]
        ax.plot(
            x,
            [r.summary["throughput"]["output_tok_s"] for _, r in pts],
            "o-",
            color=method_colour(label),
            label=label,
        )
    _xaxis(ax, runs, xlabel)
    ax.set_ylabel("output tokens / s")
    ax.legend()
    _title(fig, runs, xlabel)
    return _save(fig, out / "throughput.png")


def plot_latency(runs: Runs, out: Path, xlabel: str) -> Path:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.3))
    for label, pts in _by_label(runs).items():
        x, colour = [p for p, _ in pts], method_colour(label)
        for q, style in (("p50", "o-"), ("p99", "x--")):
            a1.plot(
                x,
                [1e3 * (r.summary["ttft_s"][q] or np.nan) for _, r in pts],
                style,
                color=colour,
                label=f"{label} {q}",
            )
        a2.plot(
            x,
            [1e3 * (r.summary["tpot_s"]["p50"] or np.nan) for _, r in pts],
            "o-",
            color=colour,
            label=label,
        )
    a1.set_ylabel("TTFT (ms)")
    a2.set_ylabel("TPOT p50 (ms)")
    for ax in (a1, a2):
        _xaxis(ax, runs, xlabel)
        ax.legend(fontsize=8)
    _title(fig, runs, xlabel)
    return _save(fig, out / "latency.png")


def _last_per_label(runs):
    return {label: pts[-1] for label, pts in _by_label(runs).items()}


def plot_commit_hist(runs: Runs, out: Path, point_name: str = "concurrency") -> Path | None:
    """Fraction of request rounds at each commit length (bars on the integer lengths
    1..B), tau pooled per round in the legend."""
    last = _last_per_label(runs)
    spec = {k: pr for k, pr in last.items() if pr[1].summary["block_size"] > 1}
    if not spec:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.3))
    width = 0.8 / len(spec)
    for i, (label, (_, r)) in enumerate(spec.items()):
        hist = np.asarray(r.summary["speculation"]["commit_hist"], dtype=float)
        frac = hist / max(hist.sum(), 1)
        lengths = np.arange(1, len(hist))  # index 0 counts no round: commit_len >= 1
        ax.bar(
            lengths + (i - (len(spec) - 1) / 2) * width,
            frac[1:],
            width,
            color=method_colour(label),
            label=f"{label}, tau (pooled per round) {r.summary['speculation']['tau']:.2f}",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("commit length per round (bonus included)")
    ax.set_ylabel("fraction of request rounds")
    ax.legend(fontsize=8)
    _title(fig, runs, point_name, next(iter(spec.values()))[0])
    return _save(fig, out / "commit_hist.png")


def plot_timeline(runs: Runs, out: Path, point_name: str = "concurrency") -> Path:
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.3), sharex=True)
    last = _last_per_label(runs)
    for label, (_, r) in last.items():
        ts = r.timeseries
        a1.plot(ts["t_s"], 100 * ts["kv_used_frac"], color=method_colour(label), label=label)
        a2.plot(ts["t_s"], ts["running"], color=method_colour(label), label=label)
    a1.set_ylabel("KV pool used (%)")
    a2.set_ylabel("running requests")
    a2.yaxis.set_major_locator(MaxNLocator(integer=True))
    a2.set_xlabel("simulated time (s)")
    for ax in (a1, a2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    _title(fig, runs, point_name, next(iter(last.values()))[0])
    return _save(fig, out / "timeline.png")


def plot_runs(runs: Runs, out_dir: Path, xlabel: str = "concurrency") -> list[Path]:
    """Write every plot of a simulate job into out_dir; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot_timeline(runs, out_dir, xlabel)]
    if len({p for _, p, _ in runs}) > 1:
        paths += [plot_throughput(runs, out_dir, xlabel), plot_latency(runs, out_dir, xlabel)]
    hist = plot_commit_hist(runs, out_dir, xlabel)
    return paths + ([hist] if hist else [])


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path
