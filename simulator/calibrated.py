"""`CalibratedCostModel`: the reference engine's measured timing tables as a `CostModel`.

Selected with `engine.cost_model=calibrated`; `engine.calibration` names the table
(`h200/qwen3-8b`, or a path; default `h200/<model.name>`), which must have been measured on
the model's shapes (simulator/calibration.py refuses others). The engine pads every decode
batch of n requests to its CUDA-graph bucket nb (padding rows have no context), so the
tables are read at nb with the context averaged over nb, and the pieces are split so that
the method's sum is exactly the engine's round at grid points:

- none: target(nb, 1, kv) + lm_head(nb);
- dflash: draft block(nb, B, kv) [draft layers, head on B-1 rows, argmax] + target(nb, B,
  kv) + lm_head(nb * B) + inject(nb * B) (DFlash in simulator/methods/dflash.py adds the
  heads and the injection of the real rows; the padding rows' share is added to the
  forwards here);
- the method says which of these rows price it (`SpecMethod.calibration_rows`: `none`
  whenever B = 1) and checks the table's drafter shapes (`check_calibration`);
- prefill: the fit of the measured `Engine.prefill` wall (`PrefillFit`: a floor, then linear
  in tokens and attention pairs; n requests padded to the longest chunk), less the host time
  the simulator adds around every round (the wall already contains it: adding it again
  counted the host twice in TTFT);
- host: the time a round takes beyond its device time in `generate` (a + b * n, per method),
  split evenly into planning and processing; the copy is inside it. A table whose own host
  runs were skipped carries another model's fit (`host.<method>.source`, set at install).
  engine.host_from_calibration=false takes engine.host_* instead (a serving loop's own
  measured host times, as experiments/spec_v2.py passes; the table without a host line
  does the same).

A piece with no measured point at all (a calibration run out of budget) is priced by the
roofline model instead; a prefill by the roofline scaled to the largest measured target
forward. `label` names every such piece.

On other hardware (`hardware.name` other than the table's) each piece is scaled by the ratio
of the two roofline estimates (datasheet bandwidth and compute, `conf/hardware/`) of that
piece: an extrapolation, labelled so in `label` and in every summary.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from common.buckets import bucket
from simulator.calibration import load_calibration
from simulator.costs import RooflineCostModel
from simulator.methods import METHODS
from simulator.params import ConfigError, HardwareParams, SimConfig


class CalibratedCostModel:
    """Interpolated measurements (`CostModel` protocol); see the module docstring."""

    def __init__(self, cfg: SimConfig):
        name = cfg.engine.calibration or f"h200/{cfg.model.name}"
        doc = load_calibration(name, cfg.model)
        s = cfg.spec
        cls = METHODS[s.method]
        method = cls.calibration_rows(s)
        if method is None:
            covered = ", ".join(n for n, m in METHODS.items() if m.calibration is not None)
            raise ConfigError(f"spec.method = {s.method!r}: calibrated tables cover the "
                              f"reference engine's methods ({covered}) only")
        cls.check_calibration(s, doc)
        self.t = doc["built"]
        self.roof = RooflineCostModel(dataclasses.replace(
            cfg, hardware=HardwareParams(name=doc["hardware"]["name"])))
        self.unmeasured = sorted(k for k, v in self.t.items() if not v.measured)
        self.prefill_scale = self._anchor() if "prefill" in self.unmeasured else 1.0
        self.buckets = doc["engine"]["buckets"]
        host = doc.get("host", {}).get(method)
        e = cfg.engine
        half = (host["a_s"] / 2, host["b_s"] / 2) if host else None
        # Half of what the prefill wall holds beyond its device time (plan + process of the
        # generate loop; without a host line in the table, engine.host_*).
        self.table_host = half or ((e.host_plan_s + e.host_process_s) / 2,
                                   (e.host_plan_per_req_s + e.host_process_per_req_s) / 2)
        if half and e.host_from_calibration:
            self.plan = self.process = half
        else:
            self.plan = (e.host_plan_s, e.host_plan_per_req_s)
            self.process = (e.host_process_s, e.host_process_per_req_s)
        self.source = doc["hardware"]["name"]
        self.label = f"calibrated {name}"
        where = name if name.endswith(".json") else f"conf/calibration/{name}.json"
        self.cost_source = (f"{where}: measured on {doc['hardware'].get('gpu', self.source)} "
                            f"by the reference engine (git {str(doc.get('git_sha'))[:8]}, "
                            f"{str(doc.get('date', '?'))[:10]})")
        if self.unmeasured:
            self.label += f" (roofline for unmeasured {', '.join(self.unmeasured)})"
        self.ratio = None
        if cfg.hardware.name != self.source:
            src = dataclasses.replace(cfg, hardware=HardwareParams(name=self.source))
            self.ratio = (RooflineCostModel(cfg), RooflineCostModel(src))
            self.label += (f", extrapolated to {cfg.hardware.name} from {self.source} "
                           "(datasheet bandwidth/compute ratios)")
            self.cost_source += (f"; scaled to {cfg.hardware.name} by the roofline ratio of "
                                 "each piece")

    def _anchor(self) -> float:
        """Measured / roofline time of the largest measured target forward (prefill scale)."""
        t = self.t["target"]
        ok = np.argwhere(np.isfinite(t.raw))
        if not len(ok):
            return 1.0
        i, j, k = max(ok.tolist(), key=lambda x: (x[0] * 1000 + x[1], -x[2]))
        n, q, kv = (float(a[x]) for a, x in zip(t.axes, (i, j, k), strict=True))
        roof = self.roof.target_forward_s(np.full(int(n), q), np.full(int(n), kv))
        return float(t.raw[i, j, k] / roof)

    def _head(self, rows: float) -> float:
        if "lm_head" in self.unmeasured:
            return self.roof.lm_head_s(rows)
        return self.t["lm_head"](rows)

    def _inject(self, tokens: float) -> float:
        if "inject" in self.unmeasured:
            return self.roof.kv_materialize_s(tokens)
        return self.t["inject"](tokens)

    def _scaled(self, value, piece: str, *args):
        if self.ratio is None:
            return value
        to, src = (getattr(m, piece)(*args) for m in self.ratio)
        return value * to / src

    def _batch(self, q: np.ndarray, kv: np.ndarray) -> tuple[int, int, float, np.ndarray]:
        """(n, bucket, tokens per request, context averaged over the bucket)."""
        n = len(q)
        nb = bucket(n, self.buckets)
        return n, nb, float(q.sum()) / n, np.asarray(kv, dtype=np.float64).sum(axis=-1) / nb

    def target_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> np.ndarray | float:
        n, nb, qv, kv = self._batch(q_lens, kv_lens)
        t = self.t["target"](nb, qv, kv) + self._head(nb * qv) - self._head(n * qv)
        return self._scaled(t, "target_forward_s", q_lens, kv_lens)

    def draft_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray,
                        causal: bool = True) -> np.ndarray | float:
        n, nb, b, kv = self._batch(q_lens, kv_lens)
        t = (self.t["draft"](nb, b, kv) - self._head(n * (b - 1))
             + self._inject(nb * b) - self._inject(n * b))
        return self._scaled(t, "draft_forward_s", q_lens, kv_lens, causal)

    def prefill_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> float:
        n = len(q_lens)
        if "prefill" in self.unmeasured:
            padded = np.full(n, float(np.max(q_lens)))
            t = self.prefill_scale * self.roof.prefill_forward_s(padded, kv_lens)
        else:  # a wall time: less the LM head and the host the simulator adds around it
            a, b = self.table_host
            t = (self.t["prefill"](n, float(np.max(q_lens)), float(np.mean(kv_lens)))
                 - self._head(n) - 2 * max(a + b * n, 0.0))
        return float(self._scaled(max(t, 0.0), "prefill_forward_s", q_lens, kv_lens))

    def lm_head_s(self, n_rows: float) -> float:
        return float(self._scaled(self._head(float(n_rows)), "lm_head_s", n_rows))

    def kv_materialize_s(self, n_tokens: float) -> float:
        t = self._inject(float(n_tokens))
        return float(self._scaled(t, "kv_materialize_s", n_tokens))

    def host_plan_s(self, batch_size: int) -> float:
        return max(self.plan[0] + self.plan[1] * batch_size, 0.0)

    def host_process_s(self, batch_size: int) -> float:
        return max(self.process[0] + self.process[1] * batch_size, 0.0)

    def copy_s(self) -> float:
        return 0.0
