"""Parameter dataclasses of the simulator, with their allowed ranges; they validate themselves.

These are the schemas of the Hydra config groups too (`workbench/config.py` registers them):
every field carries its range or choices in `metadata`, and `validate(cfg)` checks the whole
tree, naming the offending key (`engine.max_running_requests = 0 is outside [1, 65536]`);
a method's own options (`spec.options`) are its options dataclass's (simulator/methods/).
Units are in the field names: `_s` seconds, `_gb` 1e9 bytes, `_tbps` 1e12 bytes/s, `_tflops`
1e12 FLOP/s, `_tokens` tokens, `_rps` requests per second.

The defaults are the main job's setup: Qwen3-8B on one H200, DFlash B = 16, overlap engine,
HumanEval closed loop, with the roofline cost model and a generic engine; the main job itself
takes the `workbench` engine profile and `auto` costs (workbench/config.py; a test checks that
those equal the composed default Hydra config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.batch_schedule import parse_schedule
from simulator.errors import ConfigError
from simulator.fields import BIG, check_field, param
from simulator.methods import METHODS


@dataclass
class ModelParams:
    """A decoder-only target model (Qwen3/Llama shapes): what sets FLOPs, bytes and KV size."""

    name: str = param("qwen3-8b")
    hidden_size: int = param(4096, 1, BIG)
    num_layers: int = param(36, 1, 4096)
    num_heads: int = param(32, 1, 4096)
    num_kv_heads: int = param(8, 1, 4096)
    head_dim: int = param(128, 1, 4096)
    intermediate_size: int = param(12288, 1, BIG)
    vocab_size: int = param(151936, 2, BIG)
    tie_embeddings: bool = param(False)
    dtype_bytes: int = param(2, choices=(1, 2, 4))
    num_experts: int = param(0, 0, 1 << 16, doc="MoE: routed experts per layer; 0: dense MLP")
    experts_per_token: int = param(0, 0, 1 << 16, doc="MoE: k, experts routed per token")
    moe_intermediate_size: int = param(0, 0, BIG, doc="MoE: one expert's SwiGLU width")
    full_attention_interval: int = param(1, 1, 4096, doc="hybrid: one layer in this many has "
                                         "softmax attention and a KV cache, the others "
                                         "linear attention with a recurrent state; 1: all")
    linear_state_bytes_per_layer: int = param(0, 0, BIG, doc="hybrid: one request's recurrent "
                                              "(and conv) state in one linear-attention layer")


@dataclass
class HardwareParams:
    """One accelerator: memory, bandwidth, matmul peak, and how much of them is reachable."""

    name: str = param("h200")
    source: str = param("measured", choices=("measured", "datasheet"))
    memory_gb: float = param(141.0, 1e-3, 1e5)
    hbm_tbps: float = param(4.30, 1e-3, 1e3)
    matmul_tflops: float = param(790.0, 1e-3, 1e6)
    matmul_efficiency: float = param(1.0, 1e-3, 1.0)
    bandwidth_efficiency: float = param(1.0, 1e-3, 1.0)
    attention_efficiency: float = param(0.6, 1e-3, 1.0)
    launch_overhead_s: float = param(30e-6, 0.0, 1.0, doc="per forward (CUDA-graph replay)")
    d2h_copy_s: float = param(20e-6, 0.0, 1.0, doc="result copy to the host per round")
    nvlink_tbps: float = param(0.45, 1e-3, 1e3, doc="GPU-to-GPU bandwidth per direction "
                               "(tensor parallelism's all-reduce, simulator/costs.py)")
    allreduce_latency_s: float = param(10e-6, 0.0, 1.0, doc="fixed time of one all-reduce")


@dataclass
class SpecParams:
    """Speculative method, block size, drafter size and acceptance model: the fields every
    method shares. A method's own options are `options`, a mapping that the method reads as
    its frozen, validated options dataclass (`SpecMethod.options`, simulator/methods/)."""

    method: str = param("dflash", choices=tuple(METHODS),
                        doc="a registered simulator method (simulator/methods/)")
    block_size: int = param(16, 1, 256, doc="B: tokens verified per request per round "
                            "(drafted tokens B - 1)")
    draft_layers: int = param(5, 0, 1024, doc="drafter layers, each of the target's shape")
    acceptance: str = param("preset", choices=("preset", "constant", "replay", "mean"))
    tau: float | None = param(None, 1.0, 1024.0, doc="override of the published tau")
    trained_block_size: int | None = param(None, 1, 256)
    alpha: float = param(0.8, 0.0, 1.0, doc="constant per-position acceptance")
    decay_logit: float = param(0.1, 0.0, 10.0, doc="preset curve: logit drop per position")
    difficulty_sigma: float = param(0.5, 0.0, 10.0, doc="per-request logit shift std")
    temperature: float = param(0.0, choices=(0.0, 1.0))
    replay_path: str | None = param(None)
    verify_schedule: list[list[int]] | None = param(
        None, 0, BIG, doc="[[lo, hi, K], ...]: K drafts for decode batches of lo..hi "
        "requests (vLLM's dynamic speculation, common/batch_schedule.py); null: B - 1 always")
    context_decay: float = param(0.0, -10.0, 10.0, doc="beta: logit drop of every position "
                                 "per doubling of the prompt past the knee "
                                 "(simulator/context_decay.py); 0: none")
    context_knee_tokens: float = param(4096.0, 1.0, 1e9, doc="c0 of the context decay")
    options: dict[str, Any] = param({}, doc="the method's own options (its options class in "
                                    "simulator/methods/<method>.py); unknown keys are errors")


@dataclass
class EngineParams:
    """Serving engine: overlap mode, memory, batching limits and host-side overheads."""

    mode: str = param("overlap", choices=("sync", "overlap"))
    tp_size: int = param(1, 1, 64, doc="tensor parallelism: GPUs per replica, weights and "
                         "KV split across them, two analytic all-reduces per layer "
                         "(roofline only)")
    kv_reserve_blocks: int = param(2, 1, 64, doc="KV reserved to committed + this * B")
    mem_fraction_static: float = param(0.85, 1e-3, 1.0)
    max_running_requests: int = param(64, 1, 1 << 20)
    chunked_prefill_size: int = param(8192, 1, BIG)
    new_token_ratio: float = param(0.4, 0.0, 1.0, doc="admission: expected share of max_new")
    host_plan_s: float = param(300e-6, 0.0, 10.0)
    host_plan_per_req_s: float = param(15e-6, 0.0, 10.0)
    host_process_s: float = param(200e-6, 0.0, 10.0)
    host_process_per_req_s: float = param(10e-6, 0.0, 10.0)
    cost_model: str = param("roofline", choices=("roofline", "calibrated", "auto"),
                            doc="auto: calibrated where conf/calibration/<hardware>/<model> "
                            "prices the method, roofline elsewhere (simulator/engine_profiles)")
    calibration: str | None = param(None, doc="calibrated: table name (h200/qwen3-8b) or "
                                    "path; default h200/<model.name>")
    host_from_calibration: bool = param(True, doc="calibrated: the table's host line (the "
                                        "generate loop); false: the host_* params above")
    prefill_launch_s: float = param(0.0, 0.0, 10.0, doc="host time to launch a prefill "
                                    "step (eager: a serving loop's measured prefill launch); "
                                    "its GPU work cannot end before it; 0: not modelled")
    moe_calibration: str | None = param(None, doc="MoE: the table whose moe_experts curve "
                                        "prices the expert GEMMs (simulator/moe_experts.py); "
                                        "null: <hardware>/<model> when it has one")
    max_stretch_rounds: int = param(256, 1, 1 << 16, doc="decode rounds per event, at most")
    profile: str = param("generic", doc="engine profile name (conf/engine/<profile>.yaml)")
    source: str | None = param(None, doc="where the profile's kernel factors and host times "
                               "come from (named in every summary's cost_source)")
    bandwidth_efficiency: float | None = param(None, 1e-3, 1.0, doc="share of HBM bandwidth "
                                               "the engine's kernels reach; None: hardware's")
    matmul_efficiency: float | None = param(None, 1e-3, 1.0, doc="share of the matmul peak "
                                            "the engine's GEMMs reach; None: hardware's")
    layer_overhead_s: float = param(0.0, 0.0, 1.0, doc="GPU time per decoder layer per "
                                    "forward beyond the roofline (kernel floors)")
    moe_layer_overhead_s: float = param(0.0, 0.0, 1.0, doc="extra GPU time per MoE layer per "
                                        "forward (routing, top-k, expert dispatch)")
    request_layer_overhead_s: float = param(0.0, 0.0, 1.0, doc="GPU time per request per "
                                            "decoder layer per forward (per-sequence work)")
    spec_round_s: float = param(0.0, 0.0, 1.0, doc="speculative path: GPU seconds per "
                                "speculative round beyond its priced forwards (the draft's "
                                "own launches and sampling, the accept kernel, their syncs)")
    spec_request_s: float = param(0.0, 0.0, 1.0, doc="speculative path: host seconds per "
                                  "request per speculative round (accept bookkeeping, KV "
                                  "slot moves), planned before the round: exposed under sync, "
                                  "hidden under overlap while the GPU round is longer")


@dataclass
class WorkloadParams:
    """Requests: dataset preset (lengths, acceptance), arrival process and count."""

    dataset: str = param("humaneval", choices=("gsm8k", "humaneval", "math500", "mtbench"))
    arrival: str = param("closed_loop", choices=("closed_loop", "poisson", "gamma", "trace"))
    concurrency: int = param(8, 1, 1 << 24)
    rate_rps: float = param(10.0, 1e-9, 1e9)
    gamma_cv: float = param(2.0, 1e-3, 1e3)
    num_requests: int = param(256, 1, 1 << 31)
    duration_s: float | None = param(None, 1e-9, 1e9, doc="open loop: arrivals up to this time")
    think_time_s: float = param(0.0, 0.0, 1e9)
    prompt_tokens_mean: float = param(180.0, 1.0, 1e7)
    prompt_tokens_cv: float = param(0.4, 0.0, 100.0)
    output_tokens_mean: float = param(360.0, 1.0, 1e7)
    output_tokens_cv: float = param(0.5, 0.0, 100.0)
    output_dist: str = param("lognormal", choices=("lognormal", "exponential"))
    max_new_tokens: int = param(2048, 1, BIG)
    trace_path: str | None = param(None)


@dataclass
class ClusterParams:
    """Replicas behind a router."""

    replicas: int = param(1, 1, 1 << 16)
    router: str = param("round_robin", choices=("round_robin", "least_outstanding"))


@dataclass
class MetricsParams:
    """Sampling of the time series, and the SLOs of goodput."""

    sample_period_s: float = param(0.05, 1e-9, 1e9)
    slo_ttft_s: float = param(2.0, 0.0, 1e9)
    slo_tpot_s: float = param(0.05, 0.0, 1e9)


@dataclass
class SimConfig:
    """Everything one simulation needs."""

    model: ModelParams = field(default_factory=ModelParams)
    hardware: HardwareParams = field(default_factory=HardwareParams)
    spec: SpecParams = field(default_factory=SpecParams)
    engine: EngineParams = field(default_factory=EngineParams)
    workload: WorkloadParams = field(default_factory=WorkloadParams)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    metrics: MetricsParams = field(default_factory=MetricsParams)
    seed: int = param(0, 0, (1 << 63) - 1)
    max_time_s: float | None = param(None, 1e-9, 1e12, doc="stop here; the rest is in flight")

    @classmethod
    def coerce(cls, cfg: Any) -> SimConfig:
        """A validated SimConfig from a SimConfig, a dict or an OmegaConf DictConfig.

        Top-level keys that are not simulator sections (an app's `sweep`, `output`) are
        ignored; unknown keys inside a section are errors.
        """
        out = cfg if isinstance(cfg, SimConfig) else _build(cls, cfg, "", strict=False)
        validate(out)
        return out


def _build(cls: type, data: Mapping, path: str, strict: bool = True) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in names]
    if strict and unknown:
        raise ConfigError(f"unknown key {path}{unknown[0]} (known: {', '.join(names)})")
    kwargs = {}
    for name, f in names.items():
        if name not in data:
            continue
        value = data[name]
        sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(sub):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path}{name} must be a mapping, got {value!r}")
            value = _build(sub, value, f"{path}{name}.")
        elif isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
            value = list(value)
        kwargs[name] = value
    return cls(**kwargs)


def validate(cfg: Any, path: str = "") -> None:
    """Check every field against its range or choices, then the cross-field rules."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{path}{f.name}"
        if dataclasses.is_dataclass(value):
            validate(value, key + ".")
            continue
        check_field(key, value, f.metadata)
    if not path:
        _check_cross(cfg)


def _check_cross(cfg: SimConfig) -> None:
    m, s, w = cfg.model, cfg.spec, cfg.workload
    if m.num_heads % m.num_kv_heads:
        raise ConfigError(
            f"model.num_kv_heads = {m.num_kv_heads} must divide model.num_heads = {m.num_heads}"
        )
    if m.num_experts and not (1 <= m.experts_per_token <= m.num_experts
                              and m.moe_intermediate_size >= 1):
        raise ConfigError(
            f"model.experts_per_token = {m.experts_per_token} must lie in [1, "
            f"model.num_experts = {m.num_experts}] and model.moe_intermediate_size >= 1 for "
            "an MoE model")
    options = METHODS[s.method].options(s)
    METHODS[s.method].validate(s)
    draft_vocab = getattr(options, "draft_vocab_size", None)
    if draft_vocab is not None and draft_vocab > m.vocab_size:
        raise ConfigError(f"spec.options.draft_vocab_size = {draft_vocab} is above "
                          f"model.vocab_size = {m.vocab_size} (a draft vocabulary is a subset "
                          "of the target's)")
    _check_tp(m, cfg.engine)
    if cfg.engine.mode == "overlap" and cfg.engine.kv_reserve_blocks < 2:
        raise ConfigError(
            f"engine.kv_reserve_blocks = {cfg.engine.kv_reserve_blocks} is outside [2, 64] "
            "for engine.mode = overlap (host seq lens lag one round)"
        )
    if s.verify_schedule is not None:
        if not METHODS[s.method].takes_verify_schedule:
            raise ConfigError(f"spec.verify_schedule: spec.method = {s.method} verifies its "
                              "own lengths (a batch-size schedule applies to drafted methods)")
        try:
            parse_schedule(s.verify_schedule)
        except ValueError as e:
            raise ConfigError(f"spec.{e}") from None
    if s.context_decay and s.acceptance not in ("preset", "constant"):
        raise ConfigError(f"spec.context_decay = {s.context_decay} needs spec.acceptance = "
                          f"preset or constant (a per-position curve), got {s.acceptance}")
    if s.acceptance == "replay" and not s.replay_path:
        raise ConfigError("spec.replay_path must be set when spec.acceptance = replay")
    if w.arrival == "trace" and not w.trace_path:
        raise ConfigError("workload.trace_path must be set when workload.arrival = trace")


def _check_tp(m: ModelParams, e: EngineParams) -> None:
    """Heads and the MLP split evenly over tp ranks; KV heads split, or are replicated when
    tp is a multiple of their count."""
    tp = e.tp_size
    if tp == 1:
        return
    if e.cost_model != "roofline":
        raise ConfigError(f"engine.tp_size = {tp} is priced by the roofline's analytic "
                          f"all-reduce only, not engine.cost_model = {e.cost_model}")
    for key, value in (("num_heads", m.num_heads), ("intermediate_size", m.intermediate_size),
                       ("vocab_size", m.vocab_size)):
        if value % tp:
            raise ConfigError(f"engine.tp_size = {tp} must divide model.{key} = {value}")
    if m.num_kv_heads % tp and tp % m.num_kv_heads:
        raise ConfigError(f"engine.tp_size = {tp} and model.num_kv_heads = {m.num_kv_heads}: "
                          "one must divide the other")
