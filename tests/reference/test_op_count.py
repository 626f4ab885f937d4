"""OpCount: what it counts (ops that write memory) and that counting leaves compiled code's
caches alone."""

from __future__ import annotations

import torch

from reference.op_count import OpCount


def test_counts_writes_not_views():
    """add: 1 (a new tensor); add_: 1 (in place); view, select, transpose: 0 (aliases that
    write nothing); sum: 1. Five calls, three writes."""
    x = torch.zeros(4)
    with OpCount() as c:
        y = x.add(1)
        y.add_(1)
        y.view(2, 2).t()[0]
        y.sum()
    assert c.ops == 3


def test_compiled_code_runs_eagerly_and_is_not_retraced():
    """A compiled function called inside the count runs its ops one by one (the count of
    the same code uncompiled) and adds no graph to dynamo's counters; outside, compilation
    goes on as before."""
    from torch._dynamo.utils import counters

    def g(x):
        return (x * 2).sin() + 1

    with OpCount() as plain:
        g(torch.randn(5))
    f = torch.compile(g, backend="eager", dynamic=False)
    f(torch.randn(4))
    graphs = counters["stats"]["unique_graphs"]
    with OpCount() as c:
        f(torch.randn(5))
    assert c.ops == plain.ops >= 3 and counters["stats"]["unique_graphs"] == graphs
    f(torch.randn(6))
    assert counters["stats"]["unique_graphs"] == graphs + 1
