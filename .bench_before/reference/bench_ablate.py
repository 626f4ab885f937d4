"""`python -m reference.bench --ablate`: batch-1 AR decode with and without the opt-in changes.

One process, one set of random Qwen3-8B weights, the variants interleaved `repeats` times:

    all off     every switch off: eager q/k tail (Inductor's ~5 kernels), cuBLAS projections
    +fused qk   reference.model.FUSED_QK (the default since the 2026-11-29 H200 ablation):
                ops.qk_norm_rope_write, one Triton launch per layer
    +attn rule  kernels.paged_attention.kernel.UNSPLIT_MAX_WIDTH = W: no split-K, no merge
                launch, when the table width is at most W (the bench's table is
                prompt + new + 2 rounded up to 64, e.g. 704)
    both        the two together
    +fused merge  kernels.paged_attention.kernel.FUSED_MERGE: the split-K programs merge
                themselves (the last split of a head, found by an atomic counter, writes the
                output), no merge launch, for every table width
    +triton gemv  reference.model.TRITON_GEMV: wqkv, wo and down through the Triton GEMV
                (kernels/gemv, tuned per shape on its first call, before capture)
    +gemv gate_up  the same and gate_up (reference.model.TRITON_GEMV_GATE_UP)
    qk+gemv     fused q/k and the Triton GEMV (split-K configs among the tuned candidates)
    qk+merge+gemv  fused q/k, fused merge and the Triton GEMV

Each variant gets fresh CUDA graphs (the switches are read at capture; the compiled layer
takes fused_qk as an argument, so torch.compile keeps one graph per value), a warm-up
generate, then a timed generate. Per variant: tok/s and wall ms/step of `generate`, and the
GPU ms/step of the captured decode graph replayed back to back (no host gaps: the device
time of one step). Reported: the median over repeats, and the change against the first
variant run (`all off` unless `names` leaves it out). `names` picks a subset (the bench's
--variants).
"""

from __future__ import annotations

import statistics

import torch

from reference import model
from reference.cuda_graphs import GraphCache
from reference.generate import generate

# (name, fused qk, attention rule, fused merge, triton gemv: 0 off, 1 wqkv/wo/down, 2 +gate_up)
VARIANTS = (("all off", False, False, False, 0), ("+fused qk", True, False, False, 0),
            ("+attn rule", False, True, False, 0), ("both", True, True, False, 0),
            ("+fused merge", False, False, True, 0), ("+triton gemv", False, False, False, 1),
            ("+gemv gate_up", False, False, False, 2), ("qk+gemv", True, False, False, 1),
            ("qk+merge+gemv", True, False, True, 1))


def decode_graph_ms(target, reps: int = 50) -> float | None:
    """Device ms of one replay of the captured bs-1 decode graph (None if none captured).

    Replaying rewrites the K/V of the last step's slots, which belong to no live request.
    """
    graphs = [e[0] for k, e in target.runtime.graphs._graphs.items()
              if k[0] == ("decode",) and e[0] is not None]
    if not graphs:
        return None
    graph = graphs[0]
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def run_variant(target, prompt: list[int], new_tokens: int, fused: bool, unsplit: int,
                fused_merge: bool = False, gemv: int = 0) -> dict:
    from kernels.paged_attention import kernel as attention

    model.FUSED_QK, attention.UNSPLIT_MAX_WIDTH = fused, unsplit
    attention.FUSED_MERGE = fused_merge
    model.TRITON_GEMV, model.TRITON_GEMV_GATE_UP = gemv >= 1, gemv >= 2
    if target.runtime is not None:
        target.runtime.graphs = GraphCache(target.device)  # recapture under the switches
    generate(target, [prompt], max_new_tokens=4)  # compile (once per fused value), capture
    ar = generate(target, [prompt], max_new_tokens=new_tokens)
    s = ar.stats
    return {"tok_s": s["tokens_per_s"], "step_ms": 1e3 * s["decode_s"] / s["rounds"],
            "gpu_step_ms": decode_graph_ms(target) if target.device.type == "cuda" else None,
            "tokens_head": ar.tokens[0][:16]}


def ablate(target, prompt: list[int], new_tokens: int, unsplit_width: int,
           repeats: int = 2, names: list[str] | None = None) -> dict:
    """Interleaved runs of VARIANTS (those in `names` when given); returns {"variants":
    [...], "unsplit_width": ...}."""
    from kernels.paged_attention import kernel as attention

    unknown = sorted(set(names or ()) - {v[0] for v in VARIANTS})
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {[v[0] for v in VARIANTS]}")
    variants = [v for v in VARIANTS if names is None or v[0] in names]

    saved = model.FUSED_QK, attention.UNSPLIT_MAX_WIDTH, attention.FUSED_MERGE
    saved_gemv = model.TRITON_GEMV, model.TRITON_GEMV_GATE_UP
    runs: dict[str, list[dict]] = {v[0]: [] for v in variants}
    try:
        for _ in range(repeats):
            for name, fused, rule, merge, gemv in variants:
                runs[name].append(run_variant(target, prompt, new_tokens, fused,
                                              unsplit_width if rule else 0, merge, gemv))
    finally:
        model.FUSED_QK, attention.UNSPLIT_MAX_WIDTH, attention.FUSED_MERGE = saved
        model.TRITON_GEMV, model.TRITON_GEMV_GATE_UP = saved_gemv
        if target.runtime is not None:
            target.runtime.graphs = GraphCache(target.device)
    table_width = target.runtime.pool.req_to_token.shape[1] if target.runtime else None
    rows = []
    for name, fused, rule, merge, gemv in variants:
        r = runs[name]
        gpu = [x["gpu_step_ms"] for x in r if x["gpu_step_ms"] is not None]
        rows.append({"variant": name, "fused_qk": fused,
                     "unsplit_max_width": unsplit_width if rule else 0, "fused_merge": merge,
                     "triton_gemv": gemv,
                     "tok_s": statistics.median(x["tok_s"] for x in r),
                     "step_ms": statistics.median(x["step_ms"] for x in r),
                     "gpu_step_ms": statistics.median(gpu) if gpu else None,
                     "runs": r})
    base = rows[0]
    for row in rows:
        row["tok_s_gain"] = row["tok_s"] / base["tok_s"] - 1
        if row["gpu_step_ms"] is not None:
            row["gpu_saving_us"] = 1e3 * (base["gpu_step_ms"] - row["gpu_step_ms"])
        row["same_tokens_as_first"] = row["runs"][0]["tokens_head"] == \
            base["runs"][0]["tokens_head"]
    from kernels.gemv import tune

    return {"variants": rows, "unsplit_width": unsplit_width, "table_width": table_width,
            "repeats": repeats, "new_tokens": new_tokens,
            "gemv_configs": {str(k): str(v or "cuBLAS (timed faster)")
                             for k, v in tune.CONFIGS.items()},
            "gemv_tune_us": {str(k): v for k, v in tune.TUNE_LOG.items()}}


def print_ablation(a: dict) -> None:
    print(f"AR bs1 ablation: median of {a['repeats']} interleaved runs, {a['new_tokens']} new "
          f"tokens, table width W={a['table_width']}, attention rule W <= {a['unsplit_width']}")
    print(f"{'variant':<14} {'tok/s':>7} {'gain':>7} {'ms/step':>8} {'GPU ms/step':>11} "
          f"{'GPU saved us':>12}  same tokens")
    for r in a["variants"]:
        gpu = "-" if r["gpu_step_ms"] is None else f"{r['gpu_step_ms']:.3f}"
        saved = "-" if r["gpu_step_ms"] is None else f"{r['gpu_saving_us']:.0f}"
        print(f"{r['variant']:<14} {r['tok_s']:>7.1f} {r['tok_s_gain']:>+7.1%} "
              f"{r['step_ms']:>8.3f} {gpu:>11} {saved:>12}  {r['same_tokens_as_first']}")
    for key, cfg in a.get("gemv_configs", {}).items():  # the tuned GEMV shapes
        times = a["gemv_tune_us"].get(key, {})
        mine = min((v for k, v in times.items() if k != "cublas" and v == v), default=None)
        if mine is not None and "cublas" in times:
            print(f"gemv (N, K, M, dtype, dev) {key}: {cfg} {mine:.1f} us, "
                  f"cuBLAS {times['cublas']:.1f} us")
