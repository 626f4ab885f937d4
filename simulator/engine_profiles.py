"""Engine profiles: what a serving engine adds to the hardware's roofline, and which cost
model prices a configuration.

A profile is one option of the `engine` config group (conf/engine/<profile>.yaml, fields of
`EngineParams`), named by `engine.profile`:

- what overlaps with what: `mode` sync (Spec V1: host planning, the GPU round, the copy and
  the host's processing run in sequence) or overlap (Spec V2: the host plans round k + 1 and
  processes round k - 1 while the GPU runs round k, so host time costs only where it exceeds
  the GPU's; simulator/stretch.py places both timelines);
- per-step host work: `host_plan_s + host_plan_per_req_s * n` before a round and
  `host_process_s + host_process_per_req_s * n` after it;
- kernel factors (`KernelFactors`): the shares of the matmul peak and HBM bandwidth its
  kernels reach, the launch per forward, and GPU time the roofline does not see: per decoder
  layer per forward (kernel floors), per MoE layer (routing, dispatch), per request per layer
  (per-sequence attention work);
- the speculative path's own costs (`spec_path_s`), two physical terms per engine release:
  `spec_round_s`, GPU seconds per speculative round that no priced forward holds (the
  draft's own launches and sampling, the accept kernel, the syncs between them), and
  `spec_request_s`, host seconds per request per speculative round (accept bookkeeping, KV
  slot moves) planned before the round, so exposed under sync and hidden under overlap
  while the GPU round is longer; both zero for plain decoding and for a round that drafts
  nothing (K = 0 of `spec.verify_schedule`). A fit on plain decoding cannot see them: they
  are fitted on declared anchor cells (experiments/published/protocol.py) or on an engine's
  own benchmark output (`workbench calibrate-engine`);
- `source`: where those numbers come from, carried into every summary (`cost_source`).

Profiles: `generic` (overlap.yaml, sync.yaml: the hardware file's efficiencies, estimated
host times), `workbench` (the reference engine: its measured calibration tables where they
exist), `sglang_v1`, `sglang_v2`, `vllm` (kernel factors fitted on published no-speculation
throughput by `python -m experiments.published`; FITTED names the fitted fields).

`cost_model_name` resolves `engine.cost_model = auto`: the calibrated tables when
conf/calibration/<hardware>/<model>.json exists and measures the method's rounds on the
configured model and drafter shapes, the roofline otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from simulator.calibration import check_model, table_path
from simulator.methods import METHODS
from simulator.params import ConfigError, SimConfig

FITTED = (
    "bandwidth_efficiency",
    "layer_overhead_s",
    "moe_layer_overhead_s",
    "request_layer_overhead_s",
)


SPEC_TERMS = ("spec_round_s", "spec_request_s")


def spec_path_s(cfg: SimConfig, q, n: int):
    """(GPU seconds added to each round, host seconds added to planning) of decode rounds
    with verify lengths q ((n,) for every round alike, (rounds, n) per round) of n requests:
    `spec_round_s` on every round that drafts, `spec_request_s * n` when any does."""
    e = cfg.engine
    q = np.asarray(q)
    drafts = q.sum(axis=-1) > q.shape[-1]
    return e.spec_round_s * drafts, e.spec_request_s * n * bool(np.any(drafts))


@dataclass(frozen=True)
class KernelFactors:
    """Rates and fixed times the roofline prices a forward with (FLOP/s, bytes/s, seconds)."""

    flops: float
    attn_flops: float
    bw: float
    launch_s: float
    layer_s: float
    moe_layer_s: float
    request_layer_s: float

    @classmethod
    def of(cls, cfg: SimConfig) -> KernelFactors:
        """The hardware's peaks times the profile's efficiencies (the hardware file's where
        the profile sets none), and the profile's fixed GPU times."""
        hw, e = cfg.hardware, cfg.engine
        mm = hw.matmul_efficiency if e.matmul_efficiency is None else e.matmul_efficiency
        bw = hw.bandwidth_efficiency if e.bandwidth_efficiency is None else e.bandwidth_efficiency
        flops = hw.matmul_tflops * 1e12 * mm
        return cls(
            flops,
            flops * hw.attention_efficiency,
            hw.hbm_tbps * 1e12 * bw,
            hw.launch_overhead_s,
            e.layer_overhead_s,
            e.moe_layer_overhead_s,
            e.request_layer_overhead_s,
        )


def auto_table(cfg: SimConfig) -> str | None:
    """The calibration table `auto` prices `cfg` with: `engine.calibration`, else
    `<hardware.name>/<model.name>` when that file exists; None when there is none, when it
    was measured on other model or drafter shapes, or when the method's rounds are not
    measured (`SpecMethod.calibration_rows`)."""
    name = cfg.engine.calibration or f"{cfg.hardware.name}/{cfg.model.name}"
    path = table_path(name)
    method = METHODS[cfg.spec.method]
    if not path.is_file() or method.calibration_rows(cfg.spec) is None:
        return None
    doc = {**json.loads(path.read_text()), "path": str(path)}
    try:
        check_model(doc, cfg.model, str(path))
        method.check_calibration(cfg.spec, doc)
    except ConfigError:
        return None
    return name


def cost_model_name(cfg: SimConfig) -> str:
    """`engine.cost_model`, with `auto` resolved to `calibrated` or `roofline`."""
    e = cfg.engine
    if e.cost_model != "auto":
        return e.cost_model
    return "calibrated" if auto_table(cfg) else "roofline"


def roofline_source(cfg: SimConfig) -> str:
    """Where a roofline-priced run's numbers come from, in one sentence."""
    hw, e = cfg.hardware, cfg.engine
    peaks = f"{hw.name} {hw.source} peaks (conf/hardware/{hw.name}.yaml)"
    return f"{peaks}; engine profile {e.profile}: {e.source or 'hardware efficiencies'}"
