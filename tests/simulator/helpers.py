"""Helpers for simulator tests: small fast configs, a cost model with fixed round times, and
the invariants every run must satisfy (Little's law, conservation, causality)."""

from __future__ import annotations

import numpy as np

from simulator.cluster import Cluster
from simulator.metrics import SimResult, summarize
from simulator.params import SimConfig


def small(method: str = "dflash", **sections) -> SimConfig:
    """A fast config: Qwen3-8B on an H200, closed loop, short requests.

    `sections` maps "section.field" (dots as "__") to values, e.g. workload__concurrency=4,
    a method option (spec__options__tree_budget=16) or a top-level field (seed=1).
    """
    cfg = SimConfig()
    cfg.spec.method = method
    if method == "none":
        cfg.spec.block_size, cfg.spec.draft_layers = 1, 0
    elif method == "eagle":
        cfg.spec.block_size, cfg.spec.draft_layers = 8, 1
    cfg.workload.num_requests = 48
    cfg.workload.concurrency = 8
    cfg.workload.prompt_tokens_mean = 64
    cfg.workload.output_tokens_mean = 96
    cfg.metrics.sample_period_s = 0.005
    for key, value in sections.items():
        if key.startswith("spec__options__"):
            cfg.spec.options[key.removeprefix("spec__options__")] = value
        elif "__" in key:
            section, name = key.split("__")
            setattr(getattr(cfg, section), name, value)
        else:
            setattr(cfg, key, value)
    if cfg.engine.mode == "sync" and "engine__kv_reserve_blocks" not in sections:
        cfg.engine.kv_reserve_blocks = 1
    return cfg


def simulate(cfg: SimConfig, cost_model=None) -> tuple[Cluster, SimResult]:
    """Run and return the cluster too, so tests can inspect replica state afterwards."""
    cluster = Cluster(SimConfig.coerce(cfg), cost_model)
    cluster.run()
    result = summarize(cluster, 0.0)
    check_invariants(cluster, result)
    return cluster, result


def check_invariants(cluster: Cluster, result: SimResult, little_tol: float = 0.05) -> None:
    """What every run must satisfy."""
    req, s = cluster.req, result.summary
    done = np.isfinite(req.finish_s)
    arrived = req.arrival_s <= cluster.env.now
    # every arrival finishes or is reported in flight
    assert s["requests"]["finished"] + s["requests"]["in_flight"] == arrived.sum()
    assert s["requests"]["finished"] == done.sum()
    # causality: arrival <= first token <= finish
    assert (req.first_token_s[done] >= req.arrival_s[done] - 1e-12).all()
    assert (req.finish_s[done] >= req.first_token_s[done] - 1e-12).all()
    # KV: free + reserved = capacity on every replica; all back when nothing is in flight
    for rep in cluster.replicas:
        st = rep.slots
        assert st.kv_free + int(st.reserved.sum()) == st.capacity
        assert st.kv_free >= 0
        if s["requests"]["in_flight"] == 0:
            assert st.kv_free == st.capacity and st.n_active == 0
    # Little's law: sampled mean number in system = arrival rate x mean time in system
    law = s["littles_law"]
    if law["L_sampled"] is not None and law["samples"] >= 200:
        assert law["rel_err"] < little_tol, law


class FixedRoundCost:
    """A CostModel whose every target forward takes `round_s` (prefill or decode) and
    everything else nothing: a replica at batch 1 is then a single server."""

    def __init__(self, round_s: float):
        self.round_s = round_s

    def target_forward_s(self, q_lens, kv_lens):
        kv = np.asarray(kv_lens)
        return self.round_s if kv.ndim == 1 else np.full(kv.shape[0], self.round_s)

    def draft_forward_s(self, q_lens, kv_lens, causal=True):
        kv = np.asarray(kv_lens)
        return 0.0 if kv.ndim == 1 else np.zeros(kv.shape[0])

    def prefill_forward_s(self, q_lens, kv_lens):
        return self.round_s

    def lm_head_s(self, n_rows):
        return 0.0

    def kv_materialize_s(self, n_tokens):
        return 0.0

    def host_plan_s(self, batch_size):
        return 0.0

    def host_process_s(self, batch_size):
        return 0.0

    def copy_s(self):
        return 0.0
