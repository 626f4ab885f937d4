"""`python -m workbench report <multirun folder>`: one CSV, table and plot of a multirun.

A job is a folder under the multirun folder holding summary.json (written by `simulate`) and
.hydra/overrides.yaml (the job's command-line overrides, written by Hydra). Every run of
every job becomes one row, named by its job, its overrides, its engine mode and its method
label; the files go to the multirun folder (or --out):

- report.csv: every row with its job's status (complete, or interrupted: the job's finished
  runs only), all overrides and the headline metrics (units in the names);
- the terminal table: the overrides that differ between jobs, engine, method and metrics
  (the overrides shared by all jobs are its caption);
- report.png: output tokens/s and goodput against the swept variable (--x; by default the
  load point when jobs sweep several, else the numeric override with the most values), one
  line per combination of the other overrides and method.

An Optuna search (optimization_results.yaml beside the jobs) also gets its best
configurations and their margin over the defaults: a table, search.json and search.png
(each trial's objective in trial order; workbench/search/report.py).

Examples:
    python -m workbench report multirun/simulate/<date>/<time>
    python -m workbench report DIR --x spec.block_size --out report_dir
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from workbench.atomic import atomic_open, atomic_path
from workbench.errors import OneLineParser, ranged
from workbench.search.space import slo_goodput


@dataclass
class Job:
    """One job of a multirun: its folder name, its overrides and its summary.json."""

    name: str
    overrides: list[str]
    summary: dict


def load_jobs(folder: Path) -> list[Job]:
    """Every job under `folder`, in job-number order (numeric folder names first)."""
    jobs = []
    for path in folder.rglob("summary.json"):
        over = path.parent / ".hydra" / "overrides.yaml"
        if over.is_file():
            jobs.append(
                Job(
                    path.parent.relative_to(folder).as_posix(),
                    list(yaml.safe_load(over.read_text()) or []),
                    json.loads(path.read_text()),
                )
            )
    return sorted(
        jobs, key=lambda j: (not j.name.isdigit(), int(j.name) if j.name.isdigit() else 0, j.name)
    )


def unfinished(folder: Path) -> list[str]:
    """Jobs under `folder` that Hydra started but that wrote no summary.json (stopped before
    their first run finished), by job name."""
    return sorted(p.parent.parent.relative_to(folder).as_posix()
                  for p in folder.rglob(".hydra/overrides.yaml")
                  if not (p.parent.parent / "summary.json").is_file())


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.lstrip("+~").partition("=")
    return key, value


METRICS = (
    ("output_tok_s", ("throughput", "output_tok_s")),
    ("requests_s", ("throughput", "requests_s")),
    ("goodput_rps", ("goodput", "requests_s")),
    ("goodput_frac", ("goodput", "fraction")),
    ("ttft_p50_s", ("ttft_s", "p50")),
    ("ttft_p99_s", ("ttft_s", "p99")),
    ("tpot_p50_s", ("tpot_s", "p50")),
    ("tpot_p99_s", ("tpot_s", "p99")),
    ("itl_p99_s", ("itl_s", "p99")),
    ("e2e_p99_s", ("e2e_s", "p99")),
    ("tau_per_request", ("speculation", "tau_per_request")),
    ("gpu_busy_frac", ("engine", "gpu_busy_frac")),
    ("preemptions", ("preemptions",)),
)


def _get(d: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        d = d[key]
    return d


def rows_of(jobs: list[Job]) -> tuple[list[dict], list[str], list[str]]:
    """(rows, override keys in first-seen order, keys whose value differs between jobs)."""
    keys: list[str] = []
    for job in jobs:
        keys += [k for k, _ in map(_split, job.overrides) if k not in keys]
    values = [dict(map(_split, job.overrides)) for job in jobs]
    varying = [k for k in keys if len({v.get(k) for v in values}) > 1]
    rows = []
    for job, over in zip(jobs, values):
        for run in job.summary["runs"]:
            point = "concurrency" if run["arrival"] == "closed_loop" else "rate_rps"
            rows.append(
                {
                    "job": job.name,
                    "status": job.summary.get("status", "complete"),
                    **{k: over.get(k, "") for k in keys},
                    "engine_mode": run["engine_mode"],
                    "method": run["label"],
                    "model": run["model"],
                    "hardware": run["hardware"],
                    "dataset": run["dataset"],
                    "arrival": run["arrival"],
                    "point": point,
                    "point_value": run.get(point),
                    **{name: _get(run, path) for name, path in METRICS},
                    "slo_goodput_rps": slo_goodput(run),
                }
            )
    return rows, keys, varying


def write_csv(rows: list[dict], path: Path) -> Path:
    """All rows, one column per field of the first row (every row has the same fields)."""
    with atomic_open(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def table(rows: list[dict], keys: list[str], varying: list[str]) -> Table:
    """Terminal table: one row per run, the varying overrides by their last key component
    when that is unambiguous; the overrides common to all jobs form the caption."""
    common = [f"{k}={rows[0][k]}" for k in keys if k not in varying and rows[0][k] != ""]
    t = Table(
        title=f"multirun: {len({r['job'] for r in rows})} jobs, {len(rows)} runs",
        caption=" ".join(common) or None,
    )
    short = [k.rsplit(".", 1)[-1] for k in varying]
    heads = short if len(set(short)) == len(short) else varying
    for col in (
        "job",
        *heads,
        "engine",
        "method",
        rows[0]["point"],
        "tok/s",
        "goodput/s",
        "SLO goodput/s",
        "TTFT99 ms",
        "TPOT99 ms",
        "tau",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        tau = r["tau_per_request"]
        t.add_row(
            r["job"] if r["status"] == "complete" else f"{r['job']} ({r['status']})",
            *(str(r[k]) for k in varying),
            r["engine_mode"],
            r["method"],
            "-" if r["point_value"] is None else f"{r['point_value']:g}",
            f"{r['output_tok_s']:,.0f}",
            f"{r['goodput_rps']:.2f}",
            f"{r['slo_goodput_rps']:.2f}",
            _ms(r["ttft_p99_s"]),
            _ms(r["tpot_p99_s"]),
            "-" if tau is None else f"{tau:.2f}",
        )
    return t


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def choose_x(rows: list[dict], varying: list[str]) -> str:
    """The load point when runs differ in it, else the numeric varying override with the
    most distinct values, else the first varying override ('point' when nothing varies)."""
    if len({r["point_value"] for r in rows}) > 1 or not varying:
        return "point_value"
    numeric = [k for k in varying if all(_number(r[k]) is not None for r in rows)]
    return max(numeric, key=lambda k: len({r[k] for r in rows})) if numeric else varying[0]


def plot(rows: list[dict], varying: list[str], x: str, path: Path) -> Path:
    """report.png: output tok/s and goodput against `x`, one line per other combination."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [
        k
        for k in [*varying, "engine_mode", "method", "point_value"]
        if k != x and len({str(r[k]) for r in rows}) > 1
    ]
    lines: dict[str, list[dict]] = {}
    for r in rows:
        lines.setdefault(" ".join(f"{k}={r[k]}" for k in others), []).append(r)
    numeric = all(_number(r[x]) is not None for r in rows)
    ticks = sorted({str(r[x]) for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, label in (
        (axes[0], "output_tok_s", "output tokens / s"),
        (axes[1], "goodput_rps", "goodput (requests / s within SLOs)"),
    ):
        for name, pts in lines.items():
            pts = sorted(pts, key=lambda r: _number(r[x]) if numeric else str(r[x]))
            xs = [_number(r[x]) if numeric else ticks.index(str(r[x])) for r in pts]
            ax.plot(xs, [r[key] for r in pts], "o-", label=name)
        if not numeric:
            ax.set_xticks(range(len(ticks)), ticks)
        ax.set_xlabel(rows[0]["point"] if x == "point_value" else x)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    if 1 < len(lines) <= 12:  # one line needs no legend (and has no label)
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m workbench report` (exit status 2 on a bad folder)."""
    p = OneLineParser(
        prog="python -m workbench report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("folder", type=Path, help="a multirun folder (Hydra's hydra.sweep.dir)")
    p.add_argument("--out", type=Path, help="where the files go (default: the folder)")
    p.add_argument("--x", help="the plot's x variable: an override key or 'point'")
    p.add_argument("--top", type=ranged(int, 1), default=5,
                   help="search: best configurations shown (>= 1)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    jobs = load_jobs(args.folder) if args.folder.is_dir() else []
    if not jobs:
        print(
            f"report error: folder = {args.folder} holds no job (summary.json beside "
            ".hydra/overrides.yaml)",
            file=sys.stderr,
        )
        return 2
    out = args.out or args.folder
    out.mkdir(parents=True, exist_ok=True)
    rows, keys, varying = rows_of(jobs)
    x = "point_value" if args.x == "point" else args.x or choose_x(rows, varying)
    if x != "point_value" and x not in keys:
        print(f"report error: --x = {x} is not one of point, {', '.join(keys)}", file=sys.stderr)
        return 2
    console = Console(width=None if Console().is_terminal else 200)
    console.print(table(rows, keys, varying))
    stopped = sorted({r["job"] for r in rows if r["status"] != "complete"})
    if stopped:
        console.print(f"interrupted jobs (their finished runs only): {', '.join(stopped)}")
    if unfinished(args.folder):
        console.print("started but no run finished (no summary.json): "
                      + ", ".join(unfinished(args.folder)))
    paths = [write_csv(rows, out / "report.csv"), plot(rows, varying, x, out / "report.png")]
    if (args.folder / "optimization_results.yaml").is_file():
        from workbench.results import write_json
        from workbench.search.report import plot_search, search_report

        doc, best = search_report(args.folder, jobs, args.top)
        console.print(best)
        margin = doc["margin_over_default"]
        console.print(
            "margin over the defaults: "
            + ("the defaults miss the SLOs" if margin is None else f"{100 * margin:+.1f}%")
        )
        paths.append(write_json(out / "search.json", doc))
        trials = [j for j in jobs if j.name.isdigit()]
        paths.append(plot_search(trials, doc["default"]["objective"], out / "search.png"))
    console.print("wrote " + ", ".join(str(p) for p in paths))
    return 0
