"""The serving loop: overlap == sync == plain greedy per request, slots, lag bounds, trace."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from common.survival import geometric_survival
from reference.cuda_graphs import GraphCache
from reference.engine import Runtime
from reference.generate import generate
from reference.kv_pool import KVPool, KVShape
from reference.methods.dflash import load_dflash
from reference.methods.oracle import OracleProposer
from reference.serve import (
    ClosedLoop,
    OpenLoop,
    ServeConfig,
    make_requests,
    poisson_arrivals,
    serve,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _prompts(lens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


def _plain(target, prompts, max_new, stop=()):
    """Plain greedy tokens of each request alone (cut at its own max_new_tokens)."""
    out = generate(target, prompts, max_new_tokens=max(max_new), stop_token_ids=stop).tokens
    return [toks[:m] for toks, m in zip(out, max_new)]


def _proposer(kind, target, drafter_dir, block, streams, seed=0):
    if kind == "ar":
        return None
    if kind == "dflash":
        return load_dflash(drafter_dir, target, block_size=block)
    curve = geometric_survival(1 + (block - 1) * 0.6, block) if block > 1 else []
    return OracleProposer(streams, block, curve, seed=seed)


def _assert_pool_empty(target):
    pool = target.runtime.pool
    pool.check()
    assert pool.free_slots == pool.num_slots - 1
    unmapped = getattr(pool, "trap", 0)  # a CheckingKVPool maps free rows to its trap slot
    assert not pool.req_to_token[0].any() and (pool.req_to_token[1:] == unmapped).all()


@given(lens=st.lists(st.integers(1, 12), min_size=1, max_size=7),
       max_new=st.lists(st.integers(1, 24), min_size=7, max_size=7),
       block=st.integers(1, 8), kind=st.sampled_from(["ar", "dflash", "oracle"]),
       concurrency=st.integers(1, 4), rate=st.none() | st.floats(0.1, 2.0),
       budget=st.integers(1, 16), max_running=st.integers(1, 4),
       stop_at=st.none() | st.integers(0, 20), seed=st.integers(0, 2**16))
def test_overlap_equals_sync_equals_plain_greedy(target, drafter_dir, lens, max_new, block,
                                                 kind, concurrency, rate, budget,
                                                 max_running, stop_at, seed):
    note(f"{lens=} {max_new=} {block=} {kind=} {concurrency=} {rate=} {budget=} "
         f"{max_running=} {stop_at=} {seed=}")
    prompts = _prompts(lens, target.config.vocab_size, seed)
    max_new = max_new[: len(prompts)]
    streams = _plain(target, prompts, max_new)
    stop = () if stop_at is None else (streams[0][min(stop_at, len(streams[0]) - 1)],)
    want = _plain(target, prompts, max_new, stop)
    arrivals = None if rate is None else poisson_arrivals(rate, len(prompts), seed)
    reqs = make_requests(prompts, max_new, arrivals)
    if kind == "ar":
        block = 1
    for mode in ("sync", "overlap"):
        workload = OpenLoop(reqs) if rate is not None else ClosedLoop(reqs, concurrency)
        cfg = ServeConfig(mode=mode, max_running=max_running, prefill_budget=budget,
                          stop_token_ids=stop, clock="steps", check=True, seed=seed)
        out = serve(target, workload, proposer=_proposer(kind, target, drafter_dir, block,
                                                         streams, seed), config=cfg)
        assert out.tokens == want, mode
        assert [lv.req.rid for lv in out.requests] == list(range(len(prompts)))
        for lv in out.requests:
            assert all(1 <= c <= block for c in lv.commits)
            assert sum(lv.commits) >= len(lv.tokens) - 1
        assert out.stats["max_lag"] <= (block if mode == "overlap" else 0)
        if mode == "sync":
            assert out.stats["discarded_rows"] == 0
        _assert_pool_empty(target)


def test_chunked_prefill_writes_the_kv_of_a_whole_prefill(target, dflash):
    """Target and draft (injected) KV, and the next token, do not depend on the chunking."""
    from reference.engine import Engine, runtime
    from reference.verify import Sampling

    prompt = _prompts([13], target.config.vocab_size, seed=8)[0]
    rt = runtime(target, dflash.draft_kv, 4, 64)
    engine = Engine(target, dflash, rt, Sampling(), 0)
    whole, chunked = rt.pool.admit(len(prompt)), rt.pool.admit(len(prompt))
    try:
        first = engine.prefill([whole], [prompt], [0])
        for start, end in ((0, 3), (3, 8), (8, 13)):
            last = engine.prefill([chunked], [prompt[start:end]], [start])
        assert last.tolist() == first.tolist()
        a, b = (rt.pool.req_to_token[r, : len(prompt)].long() for r in (whole, chunked))
        for pool in (rt.pool.k, rt.pool.v, rt.pool.draft_k, rt.pool.draft_v):
            torch.testing.assert_close(pool[:, b], pool[:, a], rtol=1e-5, atol=1e-5)
    finally:
        rt.pool.release(whole)
        rt.pool.release(chunked)


def test_overlap_lags_one_round_and_discards_the_extra_round(target):
    """Overlap plans with stale host lengths (lag up to B) and runs finished requests once
    more; rows and slots are reused by later requests."""
    block = 6
    prompts = _prompts([5, 9, 3, 7, 4, 8, 2, 6], target.config.vocab_size, seed=11)
    max_new = [13, 7, 20, 1, 9, 16, 4, 11]
    streams = _plain(target, prompts, max_new)
    reqs = make_requests(prompts, max_new)
    stats = {}
    for mode in ("sync", "overlap"):
        oracle = OracleProposer(streams, block, geometric_survival(4.0, block), seed=3)
        out = serve(target, ClosedLoop(reqs, 3), proposer=oracle,
                    config=ServeConfig(mode=mode, clock="steps", check=True, prefill_budget=6))
        assert out.tokens == streams
        assert len({lv.row for lv in out.requests}) <= 3 < len(reqs)  # rows were reused
        stats[mode] = out.stats
    assert stats["sync"]["max_lag"] == 0 and stats["sync"]["discarded_rows"] == 0
    assert 0 < stats["overlap"]["max_lag"] <= block
    assert stats["overlap"]["discarded_rows"] > 0
    for s in stats.values():  # only plans that release rows wait for the step in flight
        assert 0 < s["fenced_plans"] < s["decode_rounds"] + s["prefill_steps"]
    _assert_pool_empty(target)


def test_admission_waits_for_kv_headroom(target):
    """A pool with room for two requests' claims serves five, never more than two at once."""
    cfg = target.config
    block, max_new = 4, [10] * 5
    prompts = _prompts([6] * 5, cfg.vocab_size, seed=2)
    streams = _plain(target, prompts, max_new)
    claim = 6 + 10 + 2 * block
    pool = KVPool(2 * claim + 3, 8, 64, KVShape(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim),
                  None, target.dtype, "cpu")
    target.runtime = Runtime(pool, GraphCache("cpu"))
    try:
        oracle = OracleProposer(streams, block, geometric_survival(2.5, block))
        out = serve(target, ClosedLoop(make_requests(prompts, max_new), 5), proposer=oracle,
                    config=ServeConfig(mode="overlap", clock="steps", check=True,
                                       max_running=4))
        assert out.tokens == streams
        assert max(bs for _, bs, _, _ in out.timeline.steps) == 2
        assert target.runtime is not None and target.runtime.pool is pool
        _assert_pool_empty(target)
        big = make_requests([[1] * 30], 30)  # fits the table (64 wide), not the 50 slots
        with pytest.raises(ValueError, match="KV slots"):
            serve(target, OpenLoop(big), config=ServeConfig(clock="steps", max_running=4))
    finally:
        target.runtime = None


def test_wall_clock_arrivals_and_sampling(target, dflash):
    prompts = _prompts([4, 7, 2, 5], target.config.vocab_size, seed=4)
    reqs = make_requests(prompts, 12, [0.0, 0.002, 0.004, 0.03])
    cfg = ServeConfig(mode="overlap", sampling=ServeConfig().sampling._replace(temperature=0.9,
                                                                               top_k=8))
    out = serve(target, OpenLoop(reqs), proposer=dflash, config=cfg)
    assert [len(t) for t in out.tokens] == [12] * 4
    assert all(lv.arrive_s >= lv.req.arrival_s for lv in out.requests)
    assert out.stats["throughput_tok_s"] > 0 and out.stats["tpot_s"] > 0
    _assert_pool_empty(target)


def test_closed_loop_keeps_concurrency():
    reqs = make_requests([[1]] * 5, 3)
    loop = ClosedLoop(reqs, 2)
    assert [r.rid for r in loop.due(0.0)] == [0, 1] and loop.next_arrival() is None
    loop.on_finish(reqs[0], 7.0)
    assert loop.next_arrival() == 7.0 and [r.rid for r in loop.due(7.0)] == [2]
    times = poisson_arrivals(5.0, 2000, seed=1)
    assert times == sorted(times) and abs(times[-1] / 2000 - 0.2) < 0.02


def test_timeline_is_a_chrome_trace_of_host_phases_and_device_steps(target, dflash, tmp_path):
    prompts = _prompts([5, 3, 8], target.config.vocab_size, seed=9)
    out = serve(target, ClosedLoop(make_requests(prompts, [9, 14, 5]), 2), proposer=dflash,
                config=ServeConfig(mode="overlap", prefill_budget=4))
    trace = json.loads(out.timeline.write(tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= -1.0 for e in spans)
    names = {e["name"] for e in spans}
    assert {"plan", "launch", "wait", "process", "results to host", *("draft", "verify",
            "accept", "inject")} <= names
    steps = [e for e in spans if e["cat"] in ("decode", "prefill")]
    s = out.stats
    assert len(steps) == s["decode_rounds"] + s["prefill_steps"]
    assert sum(e["cat"] == "prefill" for e in steps) >= 2  # chunked: 8 tokens, budget 4
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}
    assert 0.0 <= s["gpu_idle_fraction"] < 1.0 and s["host_ms_per_step"] > 0
    # the launch split by step kind adds back up to the launch time per step
    n = s["decode_rounds"] + s["prefill_steps"]
    split = s["decode_launch_ms"] * s["decode_rounds"] + s["prefill_launch_ms"] * s[
        "prefill_steps"]
    assert split == pytest.approx(s["launch_ms_per_step"] * n, rel=1e-9)
    assert s["prefill_ms"] > 0 and 0.0 < s["prefill_share"] <= 1.0


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.gpu
@pytest.mark.parametrize("check", [False, True])
def test_cuda_overlap_is_lossless(tiny_dir, drafter_dir, check, tmp_path):
    """On CUDA (graphs, Triton kernels, real plan/copy streams and events): overlap == sync
    == plain greedy; check=False runs without the checks' device syncs."""
    from reference.loaders import load_target

    gpu = load_target(tiny_dir, device="cuda")
    prompts = _prompts([5, 9, 3, 12, 1, 7, 4, 10, 6, 2], 48, seed=1)
    max_new = [30, 12, 25, 4, 40, 18, 9, 33, 21, 15]
    streams = _plain(gpu, prompts, max_new)
    reqs = make_requests(prompts, max_new)
    for kind, block in (("ar", 1), ("dflash", 4), ("oracle", 16)):
        for mode in ("sync", "overlap"):
            proposer = _proposer(kind, gpu, drafter_dir, block, streams)
            cfg = ServeConfig(mode=mode, max_running=4, prefill_budget=8, check=check)
            out = serve(gpu, ClosedLoop(reqs, 4), proposer=proposer, config=cfg)
            assert out.tokens == streams, (kind, mode)
            _assert_pool_empty(gpu)
    out.timeline.write(tmp_path / "trace.json")
    assert 0.0 <= out.stats["gpu_idle_fraction"] < 1.0


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.gpu
def test_cuda_loop_makes_no_implicit_sync(tiny_dir, drafter_dir, monkeypatch):
    """Under torch's sync debug mode no op of the loop syncs the host with the device
    implicitly (.item(), a copy to pageable memory...): its only waits are its event fences
    and, in sync mode, the one declared read of each step's results (`DirectResult.wait`,
    which reads them straight from the device), so in overlap mode the host never waits
    inside a round."""
    from reference.loaders import load_target
    from reference.serve import Server
    from reference.serve.relay import DirectResult

    reads = []
    declared = DirectResult.wait

    def read(self):
        reads.append(1)
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("default")
        try:
            return declared(self)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    monkeypatch.setattr(DirectResult, "wait", read)

    gpu = load_target(tiny_dir, device="cuda")
    prompts = _prompts([5, 9, 3, 12, 1, 7], 48, seed=2)
    max_new = [20, 12, 25, 4, 30, 9]
    streams = _plain(gpu, prompts, max_new)
    reqs = make_requests(prompts, max_new)
    for kind, block in (("ar", 1), ("dflash", 4), ("oracle", 8)):
        for mode in ("sync", "overlap"):
            proposer = _proposer(kind, gpu, drafter_dir, block, streams)
            server = Server(gpu, proposer, ServeConfig(mode=mode, max_running=4,
                                                       prefill_budget=8), 64)
            server.warm_up(4)
            reads.clear()
            torch.cuda.set_sync_debug_mode("error")
            try:
                out = server.run(ClosedLoop(reqs, 4))
            finally:
                torch.cuda.set_sync_debug_mode("default")
            assert out.tokens == streams, (kind, mode)
            assert out.stats["fenced_plans"] < out.stats["decode_rounds"]
            assert (len(reads) > 0) == (mode == "sync"), (kind, mode)
