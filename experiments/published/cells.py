"""The published cells (experiments/published/cells.json) and their one loader.

`load(path) -> Published` expands every table row into `Cell`s, one per concurrency: the
no-speculation rows (`method` none, the only ones an engine profile is fitted on) and the
speculative rows (predicted from their tau). Throughput is published three ways, all kept as
published: tok/s; a speedup over the table's baseline row (Table 5: tok/s = speedup *
baseline, `derived`, `derived_from` "none"); or, for a baseline (Table 12), the speculative
row's tok/s divided by its speedup (`derived`, `derived_from` that row's method). Such a
baseline carries the speculative cell's own tok/s into the baseline fit, so that cell is no
independent tok/s prediction: it is scored on its published speedup instead (`scored_on`
"speedup": simulated speculative / simulated baseline tok/s against the published ratio),
every other cell on its tok/s. A table marked `unpredictable`
lists its cells among the missing, with the reason.
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
    derived: bool = False
    derived_from: str | None = None
    scored_on: str = "tok_s"

    @property
    def baseline(self) -> bool:
        return self.method == "none"


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


def _row_cells(table: dict, row: dict, base: list[float] | None) -> list[Cell]:
    cs = table["concurrency"]
    if "tok_s" in row:
        tok, derived_from = row["tok_s"], None
    elif "speedup" in row:
        tok, derived_from = [s * b for s, b in zip(row["speedup"], base, strict=True)], "none"
    else:
        ref = next(r for r in table["rows"] if r["method"] == row["from_speedup_of"])
        tok = [t / s for t, s in zip(ref["tok_s"], ref["speedup"], strict=True)]
        derived_from = ref["method"]
    taus = _per_c(row.get("tau"), len(cs))
    feeds_baseline = any(r.get("from_speedup_of") == row["method"] for r in table["rows"])
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
            derived_from is not None,
            derived_from,
            "speedup" if feeds_baseline else "tok_s",
        )
        for c, t, tau in zip(cs, tok, taus, strict=True)
    ]


def load(path: Path = HERE / "cells.json") -> Published:
    """Every cell of `path`, expanded (see the module docstring)."""
    doc = json.loads(Path(path).read_text())
    out = Published([], doc["sources"], doc["datasets"], doc["specs"])
    for table in doc["tables"]:
        base_row = next((r for r in table["rows"] if r["method"] == "none" and "tok_s" in r), None)
        base = base_row["tok_s"] if base_row else None
        cells = [c for row in table["rows"] for c in _row_cells(table, row, base)]
        if "unpredictable" in table:
            out.missing += [(c, table["unpredictable"]) for c in cells]
        else:
            out.cells += cells
    return out
