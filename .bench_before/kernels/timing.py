"""Timing helpers shared by the kernel benchmarks (CUDA only).

Three views of one callable, all in microseconds:

- `bench_us`: `triton.testing.do_bench` (CUDA events around each call, L2 flushed before
  each), p50 with p20/p80. The flush gives the host a head start, so for a single small
  launch this is close to the device time of the call.
- `graph_us`: N calls captured in one CUDA graph, replayed; per call. No host overhead, no
  launch gaps beyond the graph's own.
- `host_us`: N back-to-back calls from Python, one sync at the end; per call. This is the
  launcher's host cost whenever it exceeds the device time.

Plus the two ceilings measured in the same process: the launch floor (an empty Triton
kernel, timed all three ways) and the device-to-device copy bandwidth.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton

QUANTILES = [0.5, 0.2, 0.8]


@dataclass(frozen=True)
class Timing:
    """p50, p20 and p80 of one measurement, in microseconds."""

    p50: float
    p20: float
    p80: float

    def __str__(self) -> str:
        return f"{self.p50:.1f} ({self.p20:.1f}-{self.p80:.1f})"


def bench_us(fn: Callable[[], object], *, warmup: int = 25, rep: int = 100) -> Timing:
    """do_bench p50/p20/p80 of fn(), in microseconds (warmup and rep are in ms)."""
    p50, p20, p80 = triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=QUANTILES)
    return Timing(p50 * 1e3, p20 * 1e3, p80 * 1e3)


def graph_us(fn: Callable[[], object], *, calls: int = 100) -> Timing:
    """Per-call time of `calls` calls of fn() captured in one CUDA graph and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    t = bench_us(graph.replay)
    return Timing(t.p50 / calls, t.p20 / calls, t.p80 / calls)


def host_us(fn: Callable[[], object], *, calls: int = 2000) -> float:
    """Wall time per call of `calls` back-to-back calls of fn(), synced once at the end."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


@triton.jit
def _empty_kernel():
    pass


def launch_floor() -> dict:
    """The empty Triton launch (grid (1,)), timed the three ways."""
    launch = lambda: _empty_kernel[(1,)]()
    return dict(bench=bench_us(launch), graph=graph_us(launch), host=host_us(launch))


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = bench_us(lambda: dst.copy_(src))
    return 2 * nbytes / (t.p50 * 1e-6)


@dataclass
class Row:
    """One benchmark row: a kernel and (when it has one) its oracle on one shape.

    nbytes is the fewest bytes the kernel must move (each input read once, each output
    written once); `target` states the op's criterion for this row and `met` whether the
    measurement meets it (None: no target).
    """

    op: str
    shape: str
    dtype: str
    kernel: Timing
    oracle: Timing | None
    nbytes: int
    extra: dict
    target: str = ""
    met: bool | None = None

    @property
    def speedup(self) -> float | None:
        return None if self.oracle is None else self.oracle.p50 / self.kernel.p50

    def gbps(self) -> float:
        return self.nbytes / (self.kernel.p50 * 1e-6) / 1e9


def launch_bound_row(op: str, shape: str, dtype: str, kernel: Callable, oracle: Callable,
                     nbytes: int, floor: dict) -> Row:
    """A row for a launch-bound op, with the target every launch-bound op shares.

    Target: >= 5x faster than the eager oracle, and within 2x of the empty launch (both
    under do_bench); the CUDA-graph and host-loop views are kept in `extra`.
    """
    k, o = bench_us(kernel), bench_us(oracle)
    k_graph = graph_us(kernel)
    try:
        o_graph = graph_us(oracle).p50
    except RuntimeError:  # an oracle op that cannot be captured
        o_graph = None
    extra = dict(
        kernel_graph_us=k_graph.p50, oracle_graph_us=o_graph,
        kernel_host_us=host_us(kernel), oracle_host_us=host_us(oracle, calls=200),
        floor_ratio=k.p50 / floor["bench"].p50,
        floor_ratio_graph=k_graph.p50 / floor["graph"].p50,
    )
    met = o.p50 / k.p50 >= 5 and extra["floor_ratio"] <= 2
    return Row(op, shape, dtype, k, o, nbytes, extra, ">=5x oracle, <=2x launch floor", met)
