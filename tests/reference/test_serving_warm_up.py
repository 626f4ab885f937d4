"""`Server.warm_up` runs what the timed run runs: afterwards nothing is met for the first time.

On the CPU the graphs are eager, so the test records what would be first uses on CUDA: the
GraphCache keys (key and input shapes and dtypes, as `GraphCache.run` keys its graphs) and
every aten op by dtypes and ranks (a CUDA kernel's first launch). The timed run's sets must
lie inside the warm-up's, in both modes; its tokens equal plain greedy decoding, its stats
count only its own requests, and a warm-up does not change the results of a sampled run.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from common.survival import geometric_survival
from reference.cuda_graphs import GraphCache
from reference.generate import generate
from reference.methods.oracle import OracleProposer
from reference.serve import ClosedLoop, ServeConfig, Server, make_requests
from reference.verify import Sampling

pytestmark = pytest.mark.usefixtures("one_thread")


def _sig(x):
    if isinstance(x, torch.Tensor):
        return x.dtype, x.dim()
    if isinstance(x, (list, tuple)):
        return tuple(_sig(y) for y in x)
    return type(x).__name__


class _FirstUses(TorchDispatchMode):
    """Records aten ops (by dtypes and ranks) and GraphCache keys (as on CUDA) while on."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.ops, self.graphs = set(), set()
        run = GraphCache.run

        def recording(cache, key, fn, *inputs):
            self.graphs.add(GraphCache.full_key(key, inputs))
            return run(cache, key, fn, *inputs)

        monkeypatch.setattr(GraphCache, "run", recording)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add((str(func), _sig(args)))
        return func(*args, **(kwargs or {}))


def _setup(kind, target, dflash, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, target.config.vocab_size, (n,), generator=g).tolist()
               for n in (5, 12, 3, 9, 7, 4)]
    max_new = [9, 4, 14, 6, 11, 7]
    streams = [t[:m] for t, m in zip(generate(target, prompts, max_new_tokens=14).tokens,
                                     max_new)]
    proposer = {"ar": None, "dflash": dflash,
                "oracle": OracleProposer(streams, 4, geometric_survival(2.5, 4), seed=1)}[kind]
    return make_requests(prompts, max_new), streams, proposer


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("kind", ["ar", "dflash", "oracle"])
def test_timed_run_meets_nothing_new_after_warm_up(target, dflash, kind, mode, monkeypatch):
    reqs, streams, proposer = _setup(kind, target, dflash)
    cfg = ServeConfig(mode=mode, max_running=3, prefill_budget=8, check=True)
    server = Server(target, proposer, cfg, max(len(r.prompt) + r.max_new_tokens for r in reqs))
    warm = _FirstUses(monkeypatch)
    with warm:
        server.warm_up(3, prompt_len=max(len(r.prompt) for r in reqs))
    monkeypatch.undo()
    assert server.pool.free_slots == server.pool.num_slots - 1
    assert not server.sched.live and not server.sched.waiting
    timed = _FirstUses(monkeypatch)
    with timed:
        out = server.run(ClosedLoop(reqs, 3))
    assert out.tokens == streams
    assert timed.graphs and timed.graphs <= warm.graphs, timed.graphs - warm.graphs
    assert timed.ops <= warm.ops, sorted(map(str, timed.ops - warm.ops))
    s = out.stats
    assert s["requests"] == len(reqs) and s["output_tokens"] == sum(map(len, streams))
    assert s["decode_rounds"] + s["prefill_steps"] == len(out.timeline.steps)
    assert s["discarded_rows"] == 0 if mode == "sync" else s["discarded_rows"] > 0
    assert server.pool.free_slots == server.pool.num_slots - 1


@pytest.mark.parametrize("kind", ["dflash", "oracle"])
def test_warm_up_leaves_sampled_results_unchanged(target, dflash, kind):
    reqs, _, _ = _setup(kind, target, dflash, seed=3)
    cfg = ServeConfig(mode="overlap", max_running=3, sampling=Sampling(temperature=0.9,
                                                                       top_k=8), seed=5)
    tokens = []
    for warm in (False, True):
        _, _, proposer = _setup(kind, target, dflash, seed=3)
        server = Server(target, proposer, cfg, 32)
        if warm:
            server.warm_up(3, prompt_len=12)
        tokens.append(server.run(ClosedLoop(reqs, 3)).tokens)
    assert tokens[0] == tokens[1]
