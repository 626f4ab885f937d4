"""Two independent transcriptions of the published tables, compared cell by cell.

`python -m experiments.published.transcription_diff [FIRST SECOND]` (default cells.json and
cells_second.json next to this file) expands every table row of both files into cells keyed
by table (source, model, dataset), row (method, engine, spec) and column (concurrency), and
compares each cell's published fields: tok_s, speedup, tau (a scalar tau stands for every
column), from_speedup_of (the row a derived baseline is read from), the printed decimals of
tok_s and speedup (the row's `decimals`, from which the loader takes each cell's rounding),
and the table's hardware and whether it is marked unpredictable. It prints every disagreement
and every cell found in one file only, then a one-line count, and exits 1 if there is any of
either.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROW_FIELDS = ("tok_s", "speedup", "tau", "from_speedup_of")
PRINTED = ("tok_s", "speedup")


def cells(doc: dict) -> dict[tuple, dict]:
    """Every published cell of a cells.json-style document, keyed by (source, model, dataset,
    method, engine, spec, concurrency), as {field: value} (the fields of the module docstring)."""
    out: dict[tuple, dict] = {}
    for table in doc["tables"]:
        cs = table["concurrency"]
        for row in table["rows"]:
            for i, c in enumerate(cs):
                key = (
                    table["source"],
                    table["model"],
                    table["dataset"],
                    row["method"],
                    row["engine"],
                    row.get("spec"),
                    c,
                )
                if key in out:
                    raise ValueError(f"duplicate cell {key}")
                cell = {"hardware": table["hardware"], "unpredictable": "unpredictable" in table}
                for f in ROW_FIELDS:
                    if f in row:
                        v = row[f]
                        cell[f] = v[i] if isinstance(v, list) else v
                for f in PRINTED:
                    if f in row:
                        cell[f"{f} decimals"] = row.get("decimals", {}).get(f, "<absent>")
                out[key] = cell
    return out


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def diff(first: dict, second: dict) -> tuple[int, list[str]]:
    """(cells in both, one line per missing cell or disagreeing field) of two documents."""
    a, b = cells(first), cells(second)
    lines = [f"only in first: {k}" for k in a if k not in b]
    lines += [f"only in second: {k}" for k in b if k not in a]
    both = [k for k in a if k in b]
    for k in both:
        for f in sorted(set(a[k]) | set(b[k])):
            va, vb = a[k].get(f, "<absent>"), b[k].get(f, "<absent>")
            if not _same(va, vb):
                lines.append(f"disagree {k} {f}: first {va!r}, second {vb!r}")
    return len(both), lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", nargs="?", type=Path, default=HERE / "cells.json")
    p.add_argument("second", nargs="?", type=Path, default=HERE / "cells_second.json")
    args = p.parse_args(argv)
    n, lines = diff(json.loads(args.first.read_text()), json.loads(args.second.read_text()))
    for line in lines:
        print(line)
    print(f"{n} cells in both transcriptions, {len(lines)} disagreements or missing cells")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
