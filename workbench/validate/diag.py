"""Where the simulator's error comes from, cell by cell, from the engine's own round records.

Each round of a `validate run` records its wall time and the device time of its phases
(CUDA events), so a round splits into device (draft, verify, accept, inject) and host
(wall - device: planning, eager launches, bookkeeping, the sync). Against them: the
calibration tables' device time of the same round (graph bucket, mean context of the live
requests, `round_gpu_s`) and the calibrated host line a + b * n; and the measured prefill
against the simulated TTFT. `weakest` turns the split into the report's paragraph, and
`envelope` says what the tables' monotone envelope changed. Every claim is computed from the
files at hand (a sentence whose condition does not hold is left out).
"""

from __future__ import annotations

import numpy as np

from common.methods import BASELINE
from simulator.calibration import round_gpu_s


def split(doc: dict, calib: dict, rows: list[dict]) -> list[dict]:
    """Per cell: median measured/predicted device and host ms per round, prefill ms."""
    t, buckets, prompt = calib["built"], calib["engine"]["buckets"], doc["setup"]["prompt_tokens"]
    out = []
    for row in rows:
        c, method, block = row["concurrency"], row["method"], row["block"]
        h = calib.get("host", {}).get(method, {"a_s": 0.0, "b_s": 0.0})
        dev_m, dev_p, host_m, host_p, pre = [], [], [], [], []
        for run in doc["runs"]:
            if (run["concurrency"], run["method"], run["block"]) != (c, method, block):
                continue
            acc = run["accept_lengths"]
            pre.append(1e3 * run["prefill_s"])
            for k, rt in enumerate(run["round_times"]):
                n, wall, device = rt[0], rt[1], sum(rt[2:])
                kv = np.mean([prompt + sum(a[:k]) for a in acc if len(a) > k])
                dev_m.append(device)
                dev_p.append(round_gpu_s(t, buckets, n, block, float(kv)))
                host_m.append(wall - device)
                host_p.append(h["a_s"] + h["b_s"] * n)
        dm, dp, hm, hp = (1e3 * float(np.median(x)) for x in (dev_m, dev_p, host_m, host_p))
        err = (dp - dm) / dm * 100 if dm > 0 else float("nan")
        out.append({"c": c, "cell": "AR" if method == BASELINE else f"DFlash B={block}",
                    "dev_meas": dm, "dev_pred": dp, "dev_err": err,
                    "host_meas": hm, "host_pred": hp, "wall_meas": dm + hm,
                    "round_err": (dp + hp - dm - hm) / (dm + hm) * 100,
                    "ttft_meas": 1e3 * row["ttft_meas"], "ttft_err": row["ttft_replay_err_pct"],
                    "prefill_runs": pre})
    return out


def table(parts: list[dict]) -> list[str]:
    lines = ["| c | cell | device ms meas / table | host ms meas / model | round error | "
             "TTFT ms meas, error |", "| --: | --- | --- | --- | --: | --- |"]
    for p in parts:
        lines.append(f"| {p['c']} | {p['cell']} | {p['dev_meas']:.2f} / {p['dev_pred']:.2f} "
                     f"({p['dev_err']:+.1f}%) | {p['host_meas']:.2f} / {p['host_pred']:.2f} | "
                     f"{p['round_err']:+.1f}% | {p['ttft_meas']:.0f}, {p['ttft_err']:+.1f}% |")
    return lines


def weakest(parts: list[dict], calib: dict) -> str:
    """The paragraph: the three error sources, ranked by the numbers of this run."""
    dev = np.array([p["dev_err"] for p in parts])
    if not np.isfinite(dev).any():  # no device times recorded (CPU or synthetic runs)
        return "The runs carry no device times: no split of the error into its sources."
    worst_dev = max(parts, key=lambda p: abs(p["dev_err"]) if np.isfinite(p["dev_err"]) else -1)
    host_short = np.array([p["host_meas"] - p["host_pred"] for p in parts])
    hm = [p["host_meas"] for p in parts]
    big = max(parts, key=lambda p: p["c"] * 100 + p["dev_meas"])
    small = [p for p in parts if p["c"] == min(q["c"] for q in parts)]
    out = [
        f"Device time per round (tables vs the engine's CUDA events): median "
        f"{np.nanmedian(dev):+.1f}%, from {np.nanmin(dev):+.1f}% to {np.nanmax(dev):+.1f}%, "
        f"worst at "
        f"c={worst_dev['c']} {worst_dev['cell']} ({worst_dev['dev_err']:+.1f}%). The tables "
        "miss the eager kernels of a round (prepare_block, accept, the oracle's corruption"
        + (": the `kernels` points were skipped" if calib.get("skipped", {}).get("kernels")
           else "") + f"), so {int((dev < 0).sum())} of {int(np.isfinite(dev).sum())} cells "
        "read low." + _small_n(calib, small) + _slow_heldout(calib),
        f"Host per round (wall - device) measured {min(hm):.2f}-{max(hm):.2f} ms, growing "
        f"with the batch and B (c={big['c']} {big['cell']}: {big['host_meas']:.2f} ms); the "
        f"host line gives {_span(parts, 'AR')} ms for AR and {_span(parts, 'DFlash')} ms for "
        f"DFlash (line - measured: median {np.median(-host_short):+.2f} ms, from "
        f"{(-host_short).min():+.2f} to {(-host_short).max():+.2f}); the line also carries the "
        "device work the tables miss, so it should read above the measured host.",
    ]
    out.append(_excluded(calib))
    srcs = {h.get("source") for h in calib.get("host", {}).values()} - {None}
    if srcs:
        out.append(f"This table's own host runs were skipped; the line is borrowed from "
                   f"{', '.join(sorted(srcs))} (one batch size, so no per-request term).")
    tt = [abs(p["ttft_err"]) for p in parts]
    if not calib["built"]["prefill"].measured:
        out.append(
            f"TTFT is the weakest metric ({np.median(tt):.0f}% median, "
            f"{np.median([abs(p['ttft_err']) for p in small]):.0f}% at c={small[0]['c']}): no "
            "prefill point was measured, so the prefill is the roofline scaled to the largest "
            "measured target forward, which misses the eager prefill's latency floor (about "
            f"{min(p['ttft_meas'] for p in small):.0f} ms at c={small[0]['c']}) and is off "
            f"by {np.median([p['ttft_err'] for p in parts if p['c'] == big['c']]):+.0f}% at "
            f"c={big['c']}; end-to-end throughput carries that error (compare decode tok/s).")
    else:
        w = max(parts, key=lambda p: abs(p["ttft_err"]))
        runs = [x for p in parts if p["c"] == w["c"] for x in p["prefill_runs"]]
        out.append(f"TTFT: {np.median(tt):.1f}% median over the cells, worst at c={w['c']} "
                   f"{w['cell']} ({w['ttft_err']:+.1f}%): the engine's prefill of the same "
                   f"prompts at c = {w['c']} measured {min(runs):.0f}-{max(runs):.0f} ms over "
                   "the repeats of all its cells, against one predicted value.")
    out.append("Sampled acceptance adds the variance of its draws (few requests per cell; p99 "
               "TPOT of one request is that request).")
    return " ".join(x for x in out if x)


def envelope(calib: dict) -> str:
    """What the tables' monotone envelope changed: lowered measured points per table and the
    largest change, or that it changed none; then the prefill fit, where one was measured."""
    pre = calib["built"].get("prefill")
    fitted = " " + pre.describe() if pre is not None and pre.measured else ""
    head = ("The predictors read each table but the prefill through its monotone envelope (time "
            "non-decreasing along every axis, as more work is never faster: "
            "`monotone_envelope` in simulator/calibration.py)")
    counts, total, worst = [], 0, None
    for name, t in calib["built"].items():
        if not t.lowered:
            continue
        ok = np.isfinite(t.raw)
        counts.append(f"{name} {t.lowered} of {int(ok.sum())}")
        total += t.lowered
        drop = np.where(ok, t.values / np.where(ok, t.raw, 1.0) - 1, 0.0)
        idx = np.unravel_index(np.argmin(drop), drop.shape)
        if worst is None or drop[idx] < worst[0]:
            worst = (drop[idx], name, idx, t)
    if worst is None:
        return head + "; it changed no measured point." + fitted
    d, name, idx, t = worst
    at = ", ".join(f"{n} = {a[i]:g}" for n, a, i in zip(t.names, t.axes, idx, strict=True))
    return (f"{head}; it lowered {total} measured points ({', '.join(counts)}), the most "
            f"{name} at {at}: {1e3 * t.raw[idx]:.2f} -> {1e3 * t.values[idx]:.2f} ms "
            f"({100 * d:+.0f}%)." + fitted)


def _small_n(calib: dict, small: list[dict]) -> str:
    """The target table's smallest-n row where the envelope lowered it, and how the DFlash
    cells of the smallest concurrency read on the device now."""
    t = calib["built"]["target"]
    row, fixed = t.raw[0], t.values[0]
    lowered = np.isfinite(row) & (fixed < row)
    if not lowered.any():
        return ""
    dev = [p["dev_err"] for p in small if p["cell"].startswith("DFlash")]
    return (f" The target table's n = {t.axes[0][0]:g} row read slower than larger "
            f"workloads at {int(lowered.sum())} of its {int(np.isfinite(row).sum())} points "
            f"(up to {np.max(row[lowered] / fixed[lowered]):.1f}x), which the envelope "
            "replaces by the larger workloads' time"
            + (f"; DFlash at c = {small[0]['c']} reads {min(dev):+.1f}% to {max(dev):+.1f}% "
               "on the device." if dev else "."))


def _slow_heldout(calib: dict) -> str:
    """Held-out points that read over 5% slower than a measured grid point of at least as
    much work on every axis: no monotone table can follow them."""
    out = []
    for name, points in calib.get("heldout", {}).items():
        t = calib["built"].get(name)
        for p in points if t is not None else []:
            bigger = np.isfinite(t.raw)
            for axis, (a, x) in enumerate(zip(t.axes, p["at"], strict=True)):
                shape = [1] * t.raw.ndim
                shape[axis] = -1
                bigger = bigger & (a.reshape(shape) >= x)
            if not bigger.any() or np.min(t.raw[bigger]) * 1.05 >= p["s"]:
                continue
            idx = np.unravel_index(np.argmin(np.where(bigger, t.raw, np.inf)), t.raw.shape)
            err = (t(*p["at"]) - p["s"]) / p["s"] * 100
            at = ", ".join(f"{a[i]:g}" for a, i in zip(t.axes, idx, strict=True))
            out.append(f"{name} ({', '.join(f'{x:g}' for x in p['at'])}) {1e3 * p['s']:.3g} "
                       f"ms (table {err:+.0f}%) > ({at}) {1e3 * t.raw[idx]:.3g} ms")
    return (" Held-out points over 5% slower than a measured point of more work, which no "
            f"monotone table follows: {'; '.join(out)}." if out else "")


def _excluded(calib: dict) -> str:
    """The host fit's left-out `generate` runs, with their device time against the tables'."""
    out = []
    for method, h in calib.get("host", {}).items():
        if not h.get("excluded_n") or "source" in h:
            continue
        fit_n = set(calib["grid"]["host_n"])
        ratio = {r[method]["n"]: r[method]["device_s"] / r[method]["gpu_pred_s"]
                 for r in calib["host_runs"]["graph"] if r[method]["n"] in fit_n}
        kept = [x for n, x in ratio.items() if n not in h["excluded_n"]]
        left = ", ".join(f"{ratio[n]:.2f}x" for n in h["excluded_n"])
        out.append(f"{'AR' if method == BASELINE else 'DFlash'} at n = "
                   f"{', '.join(map(str, h['excluded_n']))} ({left} the tables' device time, "
                   f"the others' median {np.median(kept):.2f}x)")
    return ("The host fit left out the calibration's `generate` runs " + "; ".join(out)
            + ": they ran slower on the device than the tables describe, and that excess is "
            "not host time." if out else "")


def _span(parts: list[dict], kind: str) -> str:
    v = [p["host_pred"] for p in parts if p["cell"].startswith(kind)]
    return f"{min(v):.2f}" if min(v) == max(v) else f"{min(v):.2f}-{max(v):.2f}"
