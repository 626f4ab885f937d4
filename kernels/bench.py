"""`python -m kernels.bench [--out PATH] [--ops a,b]`: every kernel against its oracle, on CUDA.

First checks each kernel against its oracle on one irregular shape (kernels.check), then
measures the two ceilings of this run (device-to-device copy bandwidth; the launch floor, an
empty Triton launch), then times kernels and oracles side by side (triton.testing.do_bench,
p50 (p20-p80), microseconds). Prints shape | dtype | oracle_us | kernel_us | speedup | GB/s |
% of the copy bandwidth | target, the launch-floor view of the small ops, and the last
line is one JSON object (the stamp: git SHA, GPU, versions, UTC date; every row); --out
writes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys

import torch

from common.stamps import stamp
from kernels import OPS

# An H200's device-to-device copy bandwidth (docs/architecture.md, "Measuring"):
# the table prints this run's copy next to it, so a slow or shared GPU shows at a glance.
REFERENCE_COPY_TBPS = 4.30


@dataclasses.dataclass
class BenchContext:
    """What an op's `run` may use: this run's launch floor (kernels.timing.launch_floor) and
    copy bandwidth (B/s), and `extras`, where a run leaves tables beside its rows."""

    floor: dict
    copy_bw: float
    extras: dict = dataclasses.field(default_factory=dict)


def _bench(op: str):
    return importlib.import_module(f"kernels.{op}.bench")


def _checks(ops: list[str]) -> list[tuple]:
    """Each op's check on its BENCH_CHECK shape, on CUDA."""
    return [_bench(op).check("cuda", *_bench(op).BENCH_CHECK) for op in ops]


def _row_dict(row, copy_bw: float) -> dict:
    d = dataclasses.asdict(row)
    d.update(speedup=row.speedup, gbps=row.gbps(), pct_copy=row.gbps() * 1e9 / copy_bw * 100)
    return d


def _print(rows, floor, sweep, copy_bw: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(150, Console().width))
    main = Table(title=f"kernels vs oracles, us p50 (p20-p80); copy {copy_bw / 1e12:.2f} TB/s "
                       f"measured now ({REFERENCE_COPY_TBPS} TB/s before)")
    for col in ("op", "shape", "dtype", "oracle_us", "kernel_us", "speedup", "GB/s",
                "% copy", "target", "met"):
        main.add_column(col)
    for r in rows:
        pct = r.gbps() * 1e9 / copy_bw * 100
        met = {None: "", True: "[green]met[/]", False: "[red]MISSED[/]"}[r.met]
        main.add_row(r.op, r.shape, r.dtype, str(r.oracle or "-"), str(r.kernel),
                     "-" if r.speedup is None else f"{r.speedup:.1f}x", f"{r.gbps():.1f}",
                     f"{pct:.1f}", r.target, met)
    console.print(main)
    small = Table(title=f"launch floor: empty Triton launch {floor['bench']} us (do_bench), "
                        f"{floor['graph'].p50:.2f} us (graph), {floor['host']:.1f} us (host)")
    for col in ("op", "shape", "kernel/floor", "graph kernel/oracle us", "graph kernel/floor",
                "host kernel/oracle us"):
        small.add_column(col)
    for r in rows:
        if "floor_ratio" in r.extra:
            e = r.extra
            o_graph = "-" if e["oracle_graph_us"] is None else f"{e['oracle_graph_us']:.2f}"
            small.add_row(r.op, r.shape, f"{e['floor_ratio']:.2f}",
                          f"{e['kernel_graph_us']:.2f} / {o_graph}",
                          f"{e['floor_ratio_graph']:.2f}",
                          f"{e['kernel_host_us']:.1f} / {e['oracle_host_us']:.1f}")
    console.print(small)
    if sweep:
        tune = Table(title=f"kv norm+rope+write, T={sweep[0]['tokens']} fp32 kv_all: rows per "
                           "program x warps")
        for col in ("block_rows", "num_warps", "us", "% copy", "max |diff| vs default"):
            tune.add_column(col)
        for s in sweep:
            tune.add_row(str(s["block_rows"]), str(s["num_warps"]), f"{s['us']:.1f}",
                         f"{s['pct_copy']:.3g}", f"{s['max_abs_diff_vs_default']:.3g}")
        console.print(tune)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__)
    parser.add_argument("--out", help="write the JSON record to this path")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of ops")
    args = parser.parse_args(argv)
    ops = [op for op in args.ops.split(",") if op]
    if not torch.cuda.is_available():
        print("kernels.bench needs a CUDA GPU; use `python -m kernels.check` on the CPU")
        return 2
    from kernels.timing import copy_bandwidth, launch_floor

    checks = _checks(ops)
    for op, shape, dtype, err, bad, ok in checks:
        print(f"check {op} {shape} {dtype}: max abs err {err:.3g}, {bad} mismatches, ok={ok}")
    if not all(c[-1] for c in checks):
        return 1
    copy_bw, floor = copy_bandwidth(), launch_floor()
    ctx = BenchContext(floor, copy_bw)
    rows = [row for op in ops for row in _bench(op).run(ctx)]
    sweep = ctx.extras.get("kv_sweep", [])
    _print(rows, floor, sweep, copy_bw)
    record = stamp(
        copy_bw_tbps=copy_bw / 1e12,
        launch_floor_us={k: v if isinstance(v, float) else dataclasses.asdict(v)
                         for k, v in floor.items()},
        checks=[dict(zip(("op", "shape", "dtype", "max_abs_err", "mismatches", "ok"), c))
                for c in checks],
        rows=[_row_dict(r, copy_bw) for r in rows], kv_sweep=sweep,
        kernel_options=kernel_options(),
    )
    line = json.dumps(record)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    print(line)
    return 0


def kernel_options() -> dict:
    """The launch switches of the main rows (the ablation rows name theirs in `shape`): the
    attention kernel's and the GEMV tuning's, as the engine's EngineOptions defaults."""
    from kernels.gemv import bench as gemv_bench
    from kernels.paged_attention import bench as attention_bench

    return {"paged_attention": dict(attention_bench.LAUNCH),
            "gemv_tuning": gemv_bench.TUNING._asdict()}


if __name__ == "__main__":
    sys.exit(main())
