"""CUDA graphs of the engine's fixed-shape calls (decode, draft, verify, injection).

Each call is captured once per (key, input shapes); the engine pads the batch to a size
bucket (common/buckets.py) so a few graphs cover every batch. Inputs are copied into the
graph's static buffers and the outputs are the graph's static tensors. All graphs share one
memory pool, so an output is valid only until the next `run` of *any* graph: a graph captured
earlier reuses for its intermediates memory that a later capture may have given to its
outputs (e.g. the verify graph, captured with a first drafter, replaying over a later
drafter's draft output; PyTorch shares a pool safely only between graphs replayed in capture
order). Copy or consume what is kept (`torch.cat`, `.clone()`) before the next `run`;
tests/toy/test_engine_drafts.py models this on the CPU. On the CPU, or when disabled, `run`
simply calls the function, so the same engine code runs eagerly. A `run` inside a function
being captured (a graphed step calling another graphed step) calls its function directly:
its kernels become part of the outer graph. Inputs may be tensors or (named) tuples of
tensors and None (a round's stage results): the graph's inputs are their tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch


class GraphCache:
    """Captures and replays CUDA graphs; a pass-through on the CPU or when disabled."""

    def __init__(self, device: torch.device | str, enabled: bool = True):
        self.enabled = enabled and torch.device(device).type == "cuda"
        self._graphs: dict = {}
        self._inside = 0  # > 0 while a function is being warmed up or captured
        self._mempool = torch.cuda.graph_pool_handle() if self.enabled else None

    def run(self, key, fn: Callable, *inputs: torch.Tensor):
        """fn(*inputs) -> tensor, tuple of tensors, or None; replayed from a graph on CUDA.
        The outputs are valid until the next `run` of any key (see the module docstring).

        `key` (hashable) names the computation: a graph captured under it is replayed for any
        later call with the same key and input shapes, so fn must then compute the same thing
        (the cache keeps the first fn, and what it refers to, alive).
        """
        if not self.enabled or self._inside:  # nested in a capture: part of the outer graph
            return fn(*inputs)
        leaves, spec = flatten(inputs)
        full_key = (key, tuple((t.shape, t.dtype) for t in leaves))
        entry = self._graphs.get(full_key)
        if entry is None:
            entry = self._graphs[full_key] = self._capture(
                key, fn if spec is None else lambda *xs: fn(*unflatten(spec, iter(xs))), leaves)
        graph, static_in, static_out, first_fn = entry
        if graph is None:
            return first_fn(*leaves)
        for dst, src in zip(static_in, leaves):
            dst.copy_(src)
        graph.replay()
        return static_out

    @property
    def capturing(self) -> bool:
        """True while a function is being warmed up or captured (its runs are nested)."""
        return self._inside > 0

    @staticmethod
    def full_key(key, inputs) -> tuple:
        """What a graph is cached under: its key and its input tensors' shapes and dtypes."""
        return (key, tuple((t.shape, t.dtype) for t in flatten(inputs)[0]))

    def replay_last(self, full_key: tuple) -> None:
        """Replay the graph cached under `full_key` on its static inputs, which hold its last
        `run`'s inputs (a benchmark replaying a phase alone; no input copies)."""
        graph, static_in, _, fn = self._graphs[full_key]
        if graph is None:
            fn(*static_in)
        else:
            graph.replay()

    def _capture(self, key, fn: Callable, inputs):
        self._inside += 1
        try:
            return self._capture_inside(key, fn, inputs)
        finally:
            self._inside -= 1

    def _capture_inside(self, key, fn: Callable, inputs):
        static_in = [t.clone() for t in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: compilation, cuBLAS handles, autotuning
                fn(*static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._mempool):
                static_out = fn(*static_in)
        except RuntimeError as err:
            warnings.warn(f"CUDA graph capture of {key!r} failed, running it eagerly: {err}",
                          stacklevel=3)
            return None, static_in, None, fn
        return graph, static_in, static_out, fn


def flatten(inputs: tuple) -> tuple[list[torch.Tensor], tuple | None]:
    """The tensors of `inputs` in order, and the structure `unflatten` rebuilds them with
    (None when every input is a tensor)."""
    if all(isinstance(x, torch.Tensor) for x in inputs):
        return list(inputs), None
    leaves: list[torch.Tensor] = []
    return leaves, tuple(_spec(x, leaves) for x in inputs)


def _spec(x, leaves: list[torch.Tensor]):
    if isinstance(x, torch.Tensor):
        leaves.append(x)
        return True
    if x is None:
        return None
    if isinstance(x, tuple):
        return type(x), tuple(_spec(v, leaves) for v in x)
    raise TypeError(f"a graph input must be a tensor, None or a tuple of them, got {type(x)}")


def unflatten(spec: tuple, leaves) -> tuple:
    """The inputs `flatten` gave `spec` for, rebuilt from an iterator over their tensors."""
    return tuple(_build(s, leaves) for s in spec)


def _build(s, leaves):
    if s is True:
        return next(leaves)
    if s is None:
        return None
    kind, items = s
    values = [_build(v, leaves) for v in items]
    return kind(*values) if kind is not tuple else tuple(values)

