"""`python -m kernels.check`: every Triton kernel against its oracle on a few irregular shapes.

Runs on whatever device exists: CUDA if present, else the CPU under TRITON_INTERPRET=1 (set
here, before triton is imported). Every op of the package (kernels.OPS) is checked on the
cases its bench.py lists (`CHECKS`, each through its `check`; comparisons:
kernels/compare.py). Prints a table of oracle agreement and exits 1 on any disagreement; a
progress bar (rich, on stderr, in a terminal) counts the cases meanwhile (about 15 s on CPU).
"""

from __future__ import annotations

import argparse
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


def _benches(ops) -> list:
    return [importlib.import_module(f"kernels.{op}.bench") for op in ops]


def run_all(dev: str, ops=OPS, done=lambda: None) -> list[tuple]:
    """All rows (op, shape, dtype, max_abs_err, mismatches, ok) for device `dev`; `done()` is
    called after each case."""
    rows = []
    for bench in _benches(ops):
        for case in bench.CHECKS:
            rows.append(bench.check(dev, *case))
            done()
    return rows


class _OneLine(argparse.ArgumentParser):
    """argparse with one-line errors (kernels/ imports nothing from workbench/)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Check the ops named in `argv` (default: every op); an unknown op or flag is an error."""
    p = _OneLine(prog="python -m kernels.check", description=__doc__.splitlines()[0])
    p.add_argument("ops", nargs="*", metavar="OP", help=f"ops to check (default all: "
                   f"{', '.join(OPS)})")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    unknown = [o for o in args.ops if o not in OPS]
    if unknown:
        p.exit(2, f"{p.prog}: error: unknown op {unknown[0]} (ops: {', '.join(OPS)})\n")
    ops = tuple(args.ops) or OPS
    dev = _pick_device()
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    start, err = time.perf_counter(), Console(stderr=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("kernels vs oracles", total=sum(len(b.CHECKS) for b in _benches(ops)))
        rows = run_all(dev, ops, done=lambda: bar.advance(task))
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
