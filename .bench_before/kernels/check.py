"""`python -m kernels.check`: every Triton kernel against its oracle on a few irregular shapes.

Runs on whatever device exists: CUDA if present, else the CPU under TRITON_INTERPRET=1 (set
here, before triton is imported). Every op of the package (kernels.OPS) is checked on the
cases its bench.py lists (`CHECKS`, each through its `check`; comparisons:
kernels/compare.py). Prints a table of oracle agreement and exits 1 on any disagreement.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

import torch

from kernels import OPS


def _pick_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def run_all(dev: str, ops=OPS) -> list[tuple]:
    """All rows (op, shape, dtype, max_abs_err, mismatches, ok) for device `dev`."""
    rows = []
    for op in ops:
        bench = importlib.import_module(f"kernels.{op}.bench")
        rows += [bench.check(dev, *case) for case in bench.CHECKS]
    return rows


def main() -> int:
    dev = _pick_device()
    from rich.console import Console
    from rich.table import Table

    start = time.perf_counter()
    rows = run_all(dev)
    mode = "CUDA" if dev == "cuda" else "CPU, TRITON_INTERPRET=1"
    table = Table(title=f"Triton kernels vs PyTorch oracles ({mode}, "
                        f"{time.perf_counter() - start:.1f} s)")
    for col in ("op", "shape", "dtype", "max abs err", "mismatches", "ok"):
        table.add_column(col, justify="right" if col in ("max abs err", "mismatches") else "left")
    for op, shape, dtype, err, bad, ok in rows:
        table.add_row(op, shape, dtype, f"{err:.3g}", str(bad),
                      "[green]yes[/]" if ok else "[red]NO[/]")
    Console(width=max(100, Console().width)).print(table)
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
