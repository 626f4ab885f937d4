"""Monotone properties over configurations drawn by hypothesis.

- Higher acceptance never lowers throughput at a fixed load (closed loop).
- More replicas never raise mean TTFT under the same arrivals. At low load TTFT sits on its
  floor (prefill plus the residual of the round in flight on the chosen replica), which
  shifts by about 1-2% from run to run with the round phases, so 5% is allowed.
- Overlap (Spec V2) is never slower than sync for realistic host overheads and outputs of
  64+ tokens. (With near-free hosts and very short outputs it can be: every finished request
  rides one wasted round in overlap mode, as in SGLang.)
"""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from tests.simulator.helpers import simulate, small

TOY = dict(name="toy", hidden_size=256, num_layers=6, num_heads=4, num_kv_heads=2,
           head_dim=64, intermediate_size=768, vocab_size=4096)


def _config(method: str, model: str, **kw):
    cfg = small(method, **kw)
    if model == "toy":
        for k, v in TOY.items():
            setattr(cfg.model, k, v)
    return cfg


def _tok_s(cfg) -> float:
    return simulate(cfg)[1].summary["throughput"]["output_tok_s"]


@given(model=st.sampled_from(["qwen3-8b", "toy"]), c=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
       B=st.integers(2, 16), alpha=st.floats(0.0, 0.9), delta=st.floats(0.05, 0.3),
       mode=st.sampled_from(["sync", "overlap"]), seed=st.integers(0, 1000))
def test_higher_acceptance_never_lowers_throughput(model, c, B, alpha, delta, mode, seed):
    kw = dict(spec__acceptance="constant", spec__block_size=B, workload__concurrency=c,
              workload__num_requests=max(48, 4 * c), engine__mode=mode, seed=seed)
    low = _tok_s(_config("dflash", model, spec__alpha=alpha, **kw))
    high = _tok_s(_config("dflash", model, spec__alpha=min(1.0, alpha + delta), **kw))
    note(f"{low=} {high=}")
    assert high >= low


@given(replicas=st.integers(1, 4), rate=st.floats(2.0, 150.0),
       router=st.sampled_from(["round_robin", "least_outstanding"]),
       method=st.sampled_from(["none", "dflash"]), mode=st.sampled_from(["sync", "overlap"]),
       seed=st.integers(0, 1000))
def test_more_replicas_never_raise_mean_ttft(replicas, rate, router, method, mode, seed):
    kw = dict(workload__arrival="poisson", workload__rate_rps=rate, workload__num_requests=150,
              cluster__router=router, engine__mode=mode, seed=seed)
    fewer = simulate(small(method, cluster__replicas=replicas, **kw))[1]
    more = simulate(small(method, cluster__replicas=replicas + 1, **kw))[1]
    arrivals = fewer.requests["arrival_s"], more.requests["arrival_s"]
    assert (arrivals[0] == arrivals[1]).all()  # the same arrivals
    a, b = fewer.summary["ttft_s"]["mean"], more.summary["ttft_s"]["mean"]
    note(f"{a=} {b=}")
    assert b <= 1.05 * a


@given(method=st.sampled_from(["none", "eagle", "dflash"]),
       c=st.sampled_from([1, 2, 4, 8, 16, 32, 64]), B=st.integers(2, 16),
       host_scale=st.floats(0.75, 3.0), out=st.sampled_from([64, 96, 200, 400]),
       seed=st.integers(0, 1000))
def test_overlap_never_slower_than_sync(method, c, B, host_scale, out, seed):
    def cfg(mode):
        x = small(method, workload__concurrency=c, workload__num_requests=max(48, 4 * c),
                  workload__output_tokens_mean=out, engine__mode=mode, seed=seed)
        if method != "none":
            x.spec.block_size = B
        for f in ("host_plan_s", "host_plan_per_req_s", "host_process_s",
                  "host_process_per_req_s"):
            setattr(x.engine, f, getattr(x.engine, f) * host_scale)
        return x

    overlap, sync = _tok_s(cfg("overlap")), _tok_s(cfg("sync"))
    note(f"{overlap=} {sync=}")
    assert overlap >= sync


@given(launch=st.floats(0.01, 0.2), mode=st.sampled_from(["sync", "overlap"]),
       method=st.sampled_from(["none", "dflash"]))
def test_a_prefill_launch_bounds_the_first_token(launch, mode, method):
    """One request: its TTFT is at least the prefill launch, and a launch far above the
    device prefill moves TTFT by about its excess."""
    kw = dict(workload__concurrency=1, workload__num_requests=1, engine__mode=mode)
    base = simulate(_config(method, "toy", **kw))[1].summary["ttft_s"]["mean"]
    slow = simulate(_config(method, "toy", engine__prefill_launch_s=launch, **kw))[1]
    ttft = slow.summary["ttft_s"]["mean"]
    note(f"{base=} {ttft=}")
    assert ttft >= launch
    assert ttft <= base + launch + 1e-9
