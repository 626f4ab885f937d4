"""Timeline of a serving run: host phases and device steps, as numbers and as a Chrome trace.

Host phases (plan, launch, wait, process) are `time.perf_counter` spans. Device steps are the
fences the engine records on the forward stream (start, the end of each phase, verify-done)
and on the copy stream (results to the host); on CUDA they are events, placed on the host's
time axis through one reference event recorded while the device was idle. On the CPU the
"device" runs inside the host's launch phase, so its track mirrors the host's. The gaps
between consecutive device steps are the bubbles that overlap scheduling removes.
Open the JSON in chrome://tracing or https://ui.perfetto.dev.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch

from reference.device import Fence
from reference.engine import PHASES, Clock
from reference.serve.relay import HostResult

HOST, DEVICE = 1, 2  # trace process ids


class Timeline:
    """Collects one run's spans; read it only after the device is synchronized."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            torch.cuda.synchronize(device)
        self.ref = Fence(self.cuda).record()
        self.ref.synchronize()
        self.t0 = time.perf_counter()
        self.host: list[tuple[str, float, float, dict]] = []
        self.steps: list[tuple[str, int, Clock, HostResult]] = []

    @contextlib.contextmanager
    def span(self, name: str, **args):
        """Time a host phase."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.host.append((name, start - self.t0, time.perf_counter() - self.t0, args))

    def step(self, kind: str, bs: int, clock: Clock, result: HostResult) -> None:
        """A device step: kind 'prefill' or 'decode', bs real rows, its clock and copy."""
        self.steps.append((kind, bs, clock, result))

    def _at(self, fence: Fence) -> float:
        return fence.seconds_since(self.ref)

    def device_spans(self) -> list[dict]:
        """Per step: kind, bs, start, end (s since the run began), phases (device seconds),
        host_phases (the host's seconds to enqueue each phase), copy interval."""
        out = []
        for kind, bs, clock, result in self.steps:
            marks = [self._at(f) for f in clock.marks]
            phased = len(marks) > 2
            out.append({"kind": kind, "bs": bs, "start": marks[0], "end": marks[-1],
                        "phases": dict(zip(PHASES, clock.intervals())) if phased else {},
                        "host_phases": dict(zip(PHASES, clock.host_intervals())) if phased
                        else {},
                        "copy": (self._at(result.begin), self._at(result.done))})
        return out

    def summary(self) -> dict:
        """Device idle between steps (all steps; and decode -> decode, over the round period),
        round and phase times, host time per step."""
        spans = self.device_spans()
        if not spans:
            return {}
        window = spans[-1]["end"] - spans[0]["start"]
        gaps = [max(0.0, b["start"] - a["end"]) for a, b in zip(spans, spans[1:])]
        rounds = [s for s in spans if s["kind"] == "decode"]
        # decode -> decode only: the bubble before a round over that round's period
        pairs = [(g, b["end"] - b["start"]) for g, a, b in zip(gaps, spans, spans[1:])
                 if a["kind"] == b["kind"] == "decode"]
        period = sum(g + t for g, t in pairs)
        host = {}
        for name, t0, t1, _ in self.host:
            host[name] = host.get(name, 0.0) + t1 - t0
        n = len(spans)
        out = {
            "device_window_s": window,
            "gpu_idle_fraction": sum(gaps) / window if window > 0 else 0.0,
            "round_idle_fraction": sum(g for g, _ in pairs) / period if period > 0 else 0.0,
            "gap_ms_per_step": 1e3 * sum(gaps) / max(n - 1, 1),
            "round_ms": 1e3 * sum(s["end"] - s["start"] for s in rounds) / max(len(rounds), 1),
            "host_ms_per_step": 1e3 * sum(host.get(k, 0.0) for k in ("plan", "launch",
                                                                       "process")) / n,
            "host_wait_ms_per_step": 1e3 * host.get("wait", 0.0) / n,
        }
        for phase in PHASES:
            total = sum(s["phases"].get(phase, 0.0) for s in rounds)
            out[f"{phase}_ms_per_round"] = 1e3 * total / max(len(rounds), 1)
        for name in ("plan", "launch", "process"):
            out[f"{name}_ms_per_step"] = 1e3 * host.get(name, 0.0) / n
        out.update(self._by_kind(spans, window))
        return out

    def _by_kind(self, spans: list[dict], window: float) -> dict:
        """Host launch time per decode round and per prefill step (launch spans are in step
        order), device time per prefill step, and prefill's share of the device window.
        A prefill whose launch is as long as its device time is host-bound: the device
        waits for kernels inside the step, which no gap between steps shows."""
        launches = [t1 - t0 for name, t0, t1, _ in self.host if name == "launch"]
        out = {}
        for kind in ("decode", "prefill"):
            mine = [(s, dt) for s, dt in zip(spans, launches) if s["kind"] == kind]
            out[f"{kind}_launch_ms"] = 1e3 * sum(dt for _, dt in mine) / max(len(mine), 1)
        pre = [s["end"] - s["start"] for s in spans if s["kind"] == "prefill"]
        out["prefill_ms"] = 1e3 * sum(pre) / max(len(pre), 1)
        out["prefill_share"] = sum(pre) / window if window > 0 else 0.0
        return out

    def chrome_trace(self) -> dict:
        """The Chrome trace-event JSON object (timestamps in microseconds)."""
        def x(name, cat, pid, tid, start, end, args=None):
            return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                    "ts": round(start * 1e6, 3), "dur": round(max(end - start, 0.0) * 1e6, 3),
                    "args": args or {}}

        def meta(pid, tid, kind, name):
            return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}

        events = [meta(HOST, 0, "process_name", "host"), meta(HOST, 1, "thread_name", "scheduler"),
                  meta(DEVICE, 0, "process_name", "cuda" if self.cuda else "device (cpu)"),
                  meta(DEVICE, 1, "thread_name", "forward stream"),
                  meta(DEVICE, 2, "thread_name", "copy stream")]
        events += [x(name, "host", HOST, 1, t0, t1, args) for name, t0, t1, args in self.host]
        prev_end = None
        for i, s in enumerate(self.device_spans()):
            if prev_end is not None and s["start"] > prev_end:
                events.append(x("bubble", "idle", DEVICE, 1, prev_end, s["start"]))
            events.append(x(f"{s['kind']} bs={s['bs']}", s["kind"], DEVICE, 1, s["start"],
                            s["end"], {"step": i, "bs": s["bs"]}))
            t = s["start"]
            for phase, dt in s["phases"].items():
                events.append(x(phase, "phase", DEVICE, 1, t, t + dt))
                t += dt
            events.append(x("results to host", "copy", DEVICE, 2, *s["copy"], {"step": i}))
            prev_end = s["end"]
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.chrome_trace()))
        return path
