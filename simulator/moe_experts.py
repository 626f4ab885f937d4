"""MoE expert GEMMs priced from a measurement: efficiency by tokens per expert.

An MoE layer's experts run as one grouped GEMM whose efficiency depends on how many tokens
each touched expert gets (its M dimension): a few tokens per expert stream the expert's
weights at a small fraction of the matmul peak, hundreds approach the dense GEMM's share.
The engine's MoE measurement records it as the calibration JSON's key

    "moe_experts": {"tokens_per_expert": [t_1, ...], "efficiency": [e_1, ...]}

(`efficiency` = achieved FLOP/s of the expert GEMMs / the hardware's bf16 peak
`hardware.matmul_tflops`, at t_i tokens per touched expert, t ascending). `ExpertCurve`
interpolates it linearly in log(tokens per expert), clamped to the ends. The table is
`engine.moe_calibration` (a calibration table name such as h200/qwen3-30b-a3b, or a path to
a JSON file), else conf/calibration/<hardware>/<model>.json when that file has the key;
without one the roofline prices the experts as it prices a dense layer (max of FLOPs at the
matmul efficiency and weight bytes at the bandwidth).

Per forward of n tokens through one layer of E experts, k routed per token: touched =
`expected_experts(n, E, k)`, tokens per expert = n k / touched, expert seconds =
2 n k * expert_params / (peak * efficiency(n k / touched)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from simulator.calibration import table_path
from simulator.params import ConfigError, SimConfig
from simulator.shapes import Stack, expected_experts

KEY = "moe_experts"


@dataclass(frozen=True)
class ExpertCurve:
    """Measured expert-GEMM efficiency (share of bf16 peak) by tokens per touched expert."""

    tokens_per_expert: np.ndarray
    efficiency: np.ndarray
    source: str

    @classmethod
    def from_doc(cls, doc: dict, where: str) -> ExpertCurve:
        t = np.asarray(doc.get("tokens_per_expert", []), dtype=np.float64)
        e = np.asarray(doc.get("efficiency", []), dtype=np.float64)
        if not t.size or t.shape != e.shape or np.any(np.diff(t) <= 0) or np.any(t <= 0):
            raise ConfigError(f"{where}: {KEY} needs tokens_per_expert (ascending, > 0) and "
                              "efficiency of the same length")
        if np.any(e <= 0) or np.any(e > 1):
            raise ConfigError(f"{where}: {KEY}.efficiency must lie in (0, 1]")
        return cls(t, e, where)

    def at(self, tokens_per_expert: float) -> float:
        x = np.log(max(float(tokens_per_expert), 1e-9))
        return float(np.interp(x, np.log(self.tokens_per_expert), self.efficiency))


def expert_curve(cfg: SimConfig) -> ExpertCurve | None:
    """The configured or default measurement for an MoE target, None when there is none."""
    if not cfg.model.num_experts:
        return None
    name = cfg.engine.moe_calibration
    path = table_path(name or f"{cfg.hardware.name}/{cfg.model.name}")
    if not path.is_file():
        if name:
            raise ConfigError(f"engine.moe_calibration = {name!r}: {path} not found")
        return None
    doc = json.loads(path.read_text())
    if KEY not in doc:
        if name:
            raise ConfigError(f"engine.moe_calibration = {name!r}: {path} has no {KEY!r}")
        return None
    return ExpertCurve.from_doc(doc[KEY], str(path))


def expert_gemm_s(curve: ExpertCurve, st: Stack, tokens: float, peak_flops: float) -> float:
    """Seconds of every layer's expert GEMMs for one forward of `tokens` tokens."""
    if tokens <= 0:
        return 0.0
    touched = expected_experts(tokens, st.experts, st.experts_per_token)
    routed = tokens * st.experts_per_token
    flops = 2.0 * routed * st.expert_params
    return st.layers * flops / (peak_flops * curve.at(routed / touched))
