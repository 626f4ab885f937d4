"""A cluster run: replicas behind a router, an arrival process, and a sampler of the state.

`run(cfg)` is the simulator's entry point (`simulator.run`). Arrivals: open-loop workloads
(Poisson, Gamma, trace) are one simpy process walking the pre-drawn arrival times;
closed-loop clients send their next request when the previous one finishes. The router
sends each arrival to a replica (`round_robin`, or `least_outstanding` = fewest waiting +
running, lowest index on ties). A sampler records, every `metrics.sample_period_s`, the
number of requests in the system and each replica's KV use and running batch.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from typing import Any

import numpy as np
import simpy

from simulator.acceptance import make_acceptance
from simulator.context_decay import context_shift
from simulator.cost_models import make_cost_model
from simulator.costs import CostModel
from simulator.methods import make_method
from simulator.metrics import SimResult, summarize
from simulator.params import SimConfig
from simulator.replica import Replica
from simulator.shapes import kv_budget
from simulator.workload import make_requests, make_streams


class Cluster:
    """Replicas, router and request bookkeeping of one run."""

    def __init__(self, cfg: SimConfig, cost: CostModel | None = None):
        self.cfg = cfg
        self.env = simpy.Environment()
        streams = make_streams(cfg.seed)
        self.req = make_requests(cfg, streams)
        self.budget = kv_budget(cfg)
        self.cost = cost if cost is not None else make_cost_model(cfg)
        method = make_method(cfg)
        acc_seeds = streams["acceptance"].spawn(cfg.cluster.replicas)
        n_slots = cfg.engine.max_running_requests
        s = cfg.spec
        shift = (context_shift(self.req.prompt_tokens, s.context_decay, s.context_knee_tokens)
                 if s.context_decay else None)
        self.replicas = [
            Replica(self.env, i, cfg, self.cost, method,
                    make_acceptance(cfg, n_slots, self.req.difficulty,
                                    np.random.default_rng(acc_seeds[i]), shift),
                    self.req, self.budget.capacity_tokens, self._on_finish)
            for i in range(cfg.cluster.replicas)
        ]
        self.n_arrived = self.n_finished = 0
        self.next_rid = 0
        self._rr = 0
        self.done = self.env.event()
        self.samples: list[tuple] = []

    def dispatch(self, rid: int) -> None:
        """Route request `rid`, arriving now."""
        reps = self.replicas
        if self.cfg.cluster.router == "round_robin":
            idx = self._rr % len(reps)
            self._rr += 1
        else:
            idx = min(range(len(reps)), key=lambda i: reps[i].outstanding)
        self.req.replica[rid] = idx
        self.n_arrived += 1
        reps[idx].enqueue(rid)

    def _issue(self, rid: int, t: float) -> None:
        self.req.arrival_s[rid] = t
        if t <= self.env.now:
            self.dispatch(rid)
        else:
            ev = self.env.timeout(t - self.env.now)
            ev.callbacks.append(lambda _e, rid=rid: self.dispatch(rid))

    def _on_finish(self, rids: np.ndarray, t: np.ndarray) -> None:
        self.n_finished += len(rids)
        w = self.cfg.workload
        if w.arrival == "closed_loop":
            for ti in np.sort(t).tolist():
                if self.next_rid < len(self.req):
                    self._issue(self.next_rid, ti + w.think_time_s)
                    self.next_rid += 1
        if self.n_finished == len(self.req) and not self.done.triggered:
            self.done.succeed()

    def arrivals(self) -> Generator[simpy.Event, None, None]:
        """Open loop: dispatch pre-drawn arrivals at their times."""
        env, times = self.env, self.req.arrival_s
        for rid, t in enumerate(times.tolist()):
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dispatch(rid)

    def start_closed_loop(self) -> None:
        first = min(self.cfg.workload.concurrency, len(self.req))
        for rid in range(first):
            self._issue(rid, 0.0)
        self.next_rid = first

    def sampler(self) -> Generator[simpy.Event, None, None]:
        """Record (t, in system, KV used, running, waiting) every sample period."""
        env, period = self.env, self.cfg.metrics.sample_period_s
        while True:
            yield env.timeout(period)
            if env.peek() == float("inf"):
                return  # nothing else will ever happen: let env.run report the stall
            kv = running = waiting = 0
            for r in self.replicas:
                kv += r.kv_used_at(env.now)
                running += r.slots.n_active
                waiting += len(r.waiting)
            self.samples.append((env.now, self.n_arrived - self.n_finished, kv, running,
                                 waiting))

    def run(self) -> None:
        env = self.env
        if self.cfg.workload.arrival == "closed_loop":
            self.start_closed_loop()
        else:
            env.process(self.arrivals())
        env.process(self.sampler())
        until = self.done
        if self.cfg.max_time_s is not None:
            until = self.done | env.timeout(self.cfg.max_time_s)
        if len(self.req):
            env.run(until=until)


def run(cfg: SimConfig | Mapping[str, Any], *,
        cost_model: CostModel | None = None) -> SimResult:
    """Simulate `cfg` (a SimConfig, dict or DictConfig); `cost_model` overrides
    `engine.cost_model` (e.g. a calibrated or test model)."""
    cfg = SimConfig.coerce(cfg)
    wall = time.perf_counter()
    cluster = Cluster(cfg, cost_model)
    cluster.run()
    return summarize(cluster, time.perf_counter() - wall)
