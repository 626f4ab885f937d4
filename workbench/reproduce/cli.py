"""`python -m workbench reproduce [--only NAME ...] [--out DIR]`: the paper results, one report.

Every entry of `entries()` is one published claim (DFlash paper Tables 3, 5, 8, 9, 10, 12, 13,
Figures 3 and 5, SGLang's Spec V2 gain, DSpark, self-speculation): its paper value, a
`measure` that computes the workbench's value, and the rule that decides whether the claim
holds. A measure either runs the serving simulator on the CPU (seconds;
workbench/reproduce/sim.py) or reads committed data: GPU measurements under benchmarks/
(marked "committed GPU data") or CPU outputs under experiments/
(workbench/reproduce/data.py). The report, `report.md` and `report.json` in --out, has one
row per entry: paper value | workbench value | holds? | data | command; its header gives the
wall time and the CPU count it ran on.

--out defaults to experiments/reproduce (the committed report) when every entry runs and
to outputs/reproduce with --only, so a partial run never replaces the committed report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from common.paths import tree_output
from common.stamps import stamp
from workbench.atomic import write_text
from workbench.reproduce.data import toy_headline
from workbench.reproduce.entry import ROOT, Entry, Outcome


def entries() -> list[Entry]:
    """Every entry in the report's order (the paper's tables, then the other papers)."""
    from workbench.reproduce.data import DATA_ENTRIES
    from workbench.reproduce.sim import SIM_ENTRIES

    order = [
        "table3",
        "table5",
        "table8",
        "table9-tau",
        "table9-speed",
        "table10",
        "table12",
        "table13",
        "figure3",
        "figure5",
        "specv2-measured",
        "specv2-sim",
        "dspark-tau",
        "dspark-budget",
        "selfspec-isd",
        "selfspec-toy",
    ]
    by_name = {e.name: e for e in (*SIM_ENTRIES, *DATA_ENTRIES)}
    return [by_name[n] for n in order]


def select(all_entries: list[Entry], only: list[str] | None) -> list[Entry]:
    """The entries named by --only (all when None), in report order; ValueError names an
    unknown one."""
    if not only:
        return all_entries
    known = {e.name for e in all_entries}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ValueError(f"--only: unknown entries {unknown}; known: {sorted(known)}")
    return [e for e in all_entries if e.name in only]


def run(selected: list[Entry], log=print) -> list[dict]:
    """Measure every entry, one progress line each; a row per entry for the report."""
    rows = []
    for i, e in enumerate(selected, 1):
        t0 = time.perf_counter()
        try:
            out = e.measure()
        except FileNotFoundError as err:  # an installed copy ships no benchmarks/ data
            missing = Path(err.filename or "?")
            shown = missing.relative_to(ROOT) if missing.is_relative_to(ROOT) else missing
            out = Outcome(f"not here: {shown} (committed in the source repository, not in "
                          "the installed package)", None)
        secs = time.perf_counter() - t0
        rows.append(
            {
                "name": e.name,
                "result": e.result,
                "paper": e.paper,
                "value": out.value,
                "holds": out.holds,
                "data": out.data or e.data,
                "command": out.command or e.command,
                "seconds": round(secs, 2),
            }
        )
        log(f"[{i}/{len(selected)}] {e.name}: {verdict(out.holds)} ({secs:.1f} s)")
    return rows


def verdict(holds: bool | None) -> str:
    return {True: "yes", False: "no", None: "pending"}[holds]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict], header: dict) -> str:
    """report.md: what it is, the runtime, the tally, then one table row per entry."""
    held = sum(r["holds"] is True for r in rows)
    pending = sum(r["holds"] is None for r in rows)
    lines = [
        "# Paper results against the workbench",
        "",
        "`python -m workbench reproduce` writes this report (and report.json) from the "
        "serving simulator on the CPU and from committed data; `--only NAME` reruns one row. "
        '"committed GPU data" marks measurements made on an H200 and committed under '
        "benchmarks/ (their README gives the command, GPU and versions); the simulator rows "
        "are recomputed at every run. tau is the mean commit length per round (bonus "
        "included), pooled over rounds unless a cell says otherwise.",
        "",
        f"Runtime: {header['wall_s']:.0f} s of wall time on {header['cpus']} CPU cores "
        f"(simulator rows {header['sim_s']:.0f} s); commit {header['git_sha'] or 'unknown'}, "
        f"Python {header['python']}, numpy {header['numpy']}, simpy {header['simpy']}, "
        f"{header['date']}.",
        "",
        f"Holds: {held} of {len(rows)} rows ({len(rows) - held - pending} do not hold, "
        f"{pending} pending).",
        "",
        "Toy-world tau in the rows below is over all outputs, loops included (greedy outputs "
        "of the toy target loop, and loops are easy to draft). The loop-aware headline: "
        f"{header['toy_headline']}.",
        "",
        "| result | paper value | workbench value | holds? | data | command |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {_cell(r['result'])} (`{r['name']}`) | {_cell(r['paper'])} | "
        f"{_cell(r['value'])} | {verdict(r['holds'])} | {_cell(r['data'])} | "
        f"`{r['command']}` |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def _headline() -> str:
    """The toy world's headline, or why it is missing (an installed copy has no benchmarks/)."""
    try:
        return toy_headline()
    except FileNotFoundError:
        return "the toy world's committed results are in the source repository (benchmarks/)"


def write(rows: list[dict], header: dict, out: Path) -> list[Path]:
    """report.md and report.json under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    write_text(md, markdown(rows, header))
    write_text(js, json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    return [md, js]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m workbench reproduce", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--only", nargs="+", metavar="NAME", help="entries to run (default: all)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report folder (default: experiments/reproduce, or outputs/reproduce with --only)",
    )
    ap.add_argument("--list", action="store_true", help="print the entries and exit")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    all_entries = entries()
    if args.list:
        for e in all_entries:
            print(f"{e.name:<16} {e.result}")
        return 0
    try:
        selected = select(all_entries, args.only)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    default = ROOT / ("outputs/reproduce" if args.only else "experiments/reproduce")
    if args.out is None:
        default = tree_output(default, "--out")
    t0 = time.perf_counter()
    rows = run(selected)
    sim = {e.name for e in selected if e.data.startswith("simulator")}
    info = stamp()
    header = {
        "wall_s": time.perf_counter() - t0,
        "cpus": os.cpu_count(),
        "sim_s": sum(r["seconds"] for r in rows if r["name"] in sim),
        "git_sha": info["git_sha"],
        "date": info["date"],
        "python": info["versions"]["python"],
        "numpy": info["versions"]["numpy"],
        "simpy": info["versions"]["simpy"],
        "toy_headline": _headline(),
    }
    for path in write(rows, header, args.out or default):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
