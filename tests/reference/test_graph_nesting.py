"""GraphCache: a `run` made while another function is being captured is part of that
capture (called directly, no graph of its own), so a graphed step may call another graphed
step. The CUDA side is stood in for by a fake capture that, like the real one, calls the
function twice to warm up, once under capture, then replays on every later run."""

from __future__ import annotations

import torch

from reference.cuda_graphs import GraphCache


class FakeGraph:
    """A replay runs the recorded kernels, no Python: here, nothing."""

    replays = 0

    def replay(self):
        self.replays += 1


class FakeCapture(GraphCache):
    def __init__(self):
        super().__init__("cpu")
        self.enabled = True

    def _capture_inside(self, key, fn, inputs):
        static_in = [t.clone() for t in inputs]
        for _ in range(2):
            fn(*static_in)
        return FakeGraph(), static_in, fn(*static_in), fn


def test_a_run_inside_a_capture_joins_it():
    graphs = FakeCapture()
    inner_calls = []

    def inner(x):
        inner_calls.append(graphs._inside)
        return x + 1

    def outer(x):
        return graphs.run(("inner",), inner, x) * 2

    graphs.run(("outer",), outer, torch.zeros(3))
    assert [k[0] for k in graphs._graphs] == [("outer",)]  # no graph of its own
    assert inner_calls == [1, 1, 1]  # warm-up twice and the capture, all inside it
    assert graphs._inside == 0
    graphs.run(("inner",), inner, torch.zeros(3))  # alone: captured under its own key
    assert [k[0] for k in graphs._graphs] == [("outer",), ("inner",)]


def test_a_failed_capture_leaves_the_cache_usable():
    graphs = FakeCapture()

    def bad(x):
        raise RuntimeError("not capturable")

    try:
        graphs.run(("bad",), bad, torch.zeros(1))
    except RuntimeError:
        pass
    assert graphs._inside == 0
