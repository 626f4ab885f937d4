"""The published cells (experiments/published/cells.json) and their one loader.

`load(path) -> Published` expands every table row into `Cell`s, one per concurrency: the
no-speculation rows (`method` none, the only ones an engine profile is fitted on) and the
speculative rows (predicted from their tau). Throughput is published three ways, all kept as
published: tok/s; a speedup over the table's baseline row (Table 5: tok/s = speedup *
baseline); or, for a baseline (Table 12), the speculative row's tok/s divided by its speedup.
Such a baseline carries the speculative cell's own tok/s into the baseline fit, so that cell
is no independent tok/s prediction: it is scored on its published speedup instead
(`scored_on` "speedup": simulated speculative / simulated baseline tok/s against the
published ratio), every other cell on its tok/s. A table marked `unpredictable` lists its
cells among the missing, with the reason.

Provenance of every cell: `table` (the source, one published table or PR), `row` (model,
dataset, method, engine: the row within that table), `derived_from` (the `Cell.id` of the
other cell whose printed value enters this one's: the baseline a Table 5 speedup multiplies,
the Table 12 DFlash cell a baseline is divided out of; None for a value printed as is) and
`rounding`, the half-width of the printed values' last digit relative to the value the cell
is scored on, from each row's `decimals` (printed decimals per field): 0.5 / 1531 for a
tok/s printed 1531, 0.05 / 2.3 for a speedup printed 2.3, and for a value computed from two
printed ones the sum of both (first order: 0.05 / 1.6 + 0.5 / 249 for Table 5's 1.6 x 249).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Cell:
    """One published throughput: output tokens/s of `method` at `concurrency` clients."""

    source: str
    model: str
    hardware: str | None
    engine: str
    dataset: str
    method: str
    concurrency: int
    published_tok_s: float
    tau: float | None = None
    spec: str | None = None
    derived_from: str | None = None
    scored_on: str = "tok_s"
    rounding: float = 0.0

    @property
    def baseline(self) -> bool:
        return self.method == "none"

    @property
    def derived(self) -> bool:
        return self.derived_from is not None

    @property
    def table(self) -> str:
        return self.source

    @property
    def row(self) -> str:
        return row_name(self.model, self.dataset, self.method, self.engine)

    @property
    def id(self) -> str:
        return cell_id(self.source, self.row, self.concurrency)


def row_name(model: str, dataset: str, method: str, engine: str) -> str:
    """A row's name within its table (`Cell.row`)."""
    return f"{model} {dataset} {method} {engine}"


def cell_id(table: str, row: str, concurrency: int) -> str:
    """A cell's name in `derived_from`: "table: row, c = concurrency"."""
    return f"{table}: {row}, c = {concurrency}"


@dataclass
class Published:
    """The cells, the definitions they refer to, and the cells that cannot be predicted."""

    cells: list[Cell]
    sources: dict[str, str]
    datasets: dict[str, dict]
    specs: dict[str, dict]
    missing: list[tuple[Cell, str]] = field(default_factory=list)


def _per_c(value, n: int) -> list:
    return list(value) if isinstance(value, list) else [value] * n


def half_widths(table: dict, row: dict, field: str) -> list[float]:
    """Per concurrency, the half-width of `row[field]`'s last printed digit relative to the
    value (0.5 * 10**-decimals / value); a value with more digits than its row's `decimals`
    is an error."""
    d = row.get("decimals", {}).get(field)
    if d is None:
        raise ValueError(f"{table['source']} {table['dataset']} {row['method']}: "
                         f"no decimals for {field}")
    out = []
    for v in row[field]:
        if abs(round(v, d) - v) > 1e-9:
            raise ValueError(f"{table['source']} {table['dataset']} {row['method']}: "
                             f"{field} {v} has more than {d} decimals")
        out.append(0.5 * 10.0**-d / v)
    return out


def _row_cells(table: dict, row: dict, base_row: dict | None) -> list[Cell]:
    cs = table["concurrency"]

    def ids(r: dict) -> list[str]:
        name = row_name(table["model"], table["dataset"], r["method"], r["engine"])
        return [cell_id(table["source"], name, c) for c in cs]

    def add(a: list[float], b: list[float]) -> list[float]:
        return [x + y for x, y in zip(a, b, strict=True)]

    feeds_baseline = any(r.get("from_speedup_of") == row["method"] for r in table["rows"])
    if "tok_s" in row:
        tok, derived_from = row["tok_s"], [None] * len(cs)
        field = "speedup" if feeds_baseline else "tok_s"
        rounding = half_widths(table, row, field)
    elif "speedup" in row:
        base = base_row["tok_s"]
        tok = [s * b for s, b in zip(row["speedup"], base, strict=True)]
        derived_from = ids(base_row)
        rounding = add(half_widths(table, row, "speedup"), half_widths(table, base_row, "tok_s"))
    else:
        ref = next(r for r in table["rows"] if r["method"] == row["from_speedup_of"])
        tok = [t / s for t, s in zip(ref["tok_s"], ref["speedup"], strict=True)]
        derived_from = ids(ref)
        rounding = add(half_widths(table, ref, "tok_s"), half_widths(table, ref, "speedup"))
    taus = _per_c(row.get("tau"), len(cs))
    return [
        Cell(
            table["source"],
            table["model"],
            table["hardware"],
            row["engine"],
            table["dataset"],
            row["method"],
            c,
            float(t),
            tau,
            row.get("spec"),
            d,
            "speedup" if feeds_baseline else "tok_s",
            r,
        )
        for c, t, tau, d, r in zip(cs, tok, taus, derived_from, rounding, strict=True)
    ]


def load(path: Path = HERE / "cells.json") -> Published:
    """Every cell of `path`, expanded (see the module docstring)."""
    doc = json.loads(Path(path).read_text())
    out = Published([], doc["sources"], doc["datasets"], doc["specs"])
    for table in doc["tables"]:
        base_row = next((r for r in table["rows"] if r["method"] == "none" and "tok_s" in r), None)
        cells = [c for row in table["rows"] for c in _row_cells(table, row, base_row)]
        if "unpredictable" in table:
            out.missing += [(c, table["unpredictable"]) for c in cells]
        else:
            out.cells += cells
    return out
