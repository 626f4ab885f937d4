"""`python -m workbench.bench --ablate`: batch-1 AR decode with and without the opt-in changes.

One process, one set of random Qwen3-8B weights, the variants interleaved `repeats` times.
Each variant is an `EngineOptions` (common/engine_options.py): the base options (the bench's
flags) with every kernel switch off and the layer compiled with dynamic=True, then these
turned on:

    all off     eager q/k tail (Inductor's ~5 kernels), cuBLAS projections, split-K attention
    +fused qk   fused_qk: ops.qk_norm_rope_write, one Triton launch per layer
    +attn rule  unsplit_width = W: no split-K, no merge launch, when the table width is at
                most W (the bench's table is prompt + new + 2 rounded up to 64, e.g. 704)
    both        the two together
    +fused merge  fused_merge: the split-K programs merge themselves (the last split of a
                head, found by an atomic counter, writes the output), no merge launch
    +triton gemv  triton_gemv: wqkv, wo and down through the Triton GEMV (kernels/gemv,
                tuned per shape on its first call, before capture)
    +gemv gate_up  the same and gate_up (triton_gemv_gate_up)
    qk+gemv     fused q/k and the Triton GEMV (split-K configs among the tuned candidates)
    qk+merge+gemv  fused q/k, fused merge and the Triton GEMV
    qk+gemv+defer  fused q/k, the Triton GEMV, the residual add fused into the next layer's
                norm (deferred_residual)
    qk+gemv+defer+static  the same, the layer compiled with automatic dynamic shapes
                (compile_dynamic=False: the hidden size static)
    qk+gemv+defer+static+pdl  the same, our Triton launches as programmatic dependent
                launches (pdl)

Each variant runs on `target.with_options(opts)`: the same weights and compiled layer, the
KV pool kept, fresh CUDA graphs (the switches are baked in at capture; the compiled layer
takes them as arguments, so torch.compile keeps one graph per value). Then a warm-up
generate and a timed one. Per variant: tok/s and wall ms/step of `generate`, and the GPU
ms/step of the captured decode graph replayed back to back (no host gaps: the device time
of one step). Reported: the median over repeats, the change against the first variant run
(`all off` unless `names` leaves it out), and each row's options (`engine_options`).
`names` picks a subset (the bench's --variants).
"""

from __future__ import annotations

import statistics

import torch

from common.engine_options import EngineOptions
from reference.generate import generate

OFF = dict(fused_qk=False, triton_gemv=False, triton_gemv_gate_up=False, unsplit_width=0,
           fused_merge=False, deferred_residual=False, compile_dynamic=True, pdl=False,
           graphed_decode=False)
RULE = -1  # stands for the ablation's unsplit width in VARIANTS
# (name, the fields turned on over OFF)
VARIANTS = (
    ("all off", {}),
    ("+fused qk", dict(fused_qk=True)),
    ("+attn rule", dict(unsplit_width=RULE)),
    ("both", dict(fused_qk=True, unsplit_width=RULE)),
    ("+fused merge", dict(fused_merge=True)),
    ("+triton gemv", dict(triton_gemv=True)),
    ("+gemv gate_up", dict(triton_gemv=True, triton_gemv_gate_up=True)),
    ("qk+gemv", dict(fused_qk=True, triton_gemv=True)),
    ("qk+merge+gemv", dict(fused_qk=True, fused_merge=True, triton_gemv=True)),
    ("qk+gemv+defer", dict(fused_qk=True, triton_gemv=True, deferred_residual=True)),
    ("qk+gemv+defer+static", dict(fused_qk=True, triton_gemv=True, deferred_residual=True,
                                  compile_dynamic=False)),
    ("qk+gemv+defer+static+pdl", dict(fused_qk=True, triton_gemv=True, deferred_residual=True,
                                      compile_dynamic=False, pdl=True)),
    ("+graphed step", dict(fused_qk=True, triton_gemv=True, deferred_residual=True,
                           compile_dynamic=False, pdl=True, graphed_decode=True)),
)


def variant_options(base: EngineOptions, unsplit_width: int,
                    names: list[str] | None = None) -> dict[str, EngineOptions]:
    """{name: options} of VARIANTS (those in `names` when given, in VARIANTS' order): `base`
    with the kernel switches of OFF, then the variant's on (the attention rule at
    `unsplit_width`). Fields OFF leaves alone (GEMV tuning, compiled prefill) keep base's."""
    known = [v[0] for v in VARIANTS]
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {known}")
    out = {}
    for name, on in VARIANTS:
        if names is None or name in names:
            on = {k: unsplit_width if v == RULE else v for k, v in on.items()}
            out[name] = base.replace(**{**OFF, **on})
    return out


def decode_graph_ms(target, reps: int = 50) -> float | None:
    """Device ms of one replay of the captured bs-1 decode graph (None if none captured).

    Replaying rewrites the K/V of the last step's slots, which belong to no live request.
    """
    graphs = [e[0] for k, e in target.runtime.graphs._graphs.items()
              if k[0][0] == "decode" and e[0] is not None]
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


def run_variant(target, prompt: list[int], new_tokens: int) -> dict:
    """A warm-up (compile, capture), then timed bs-1 AR generates on `target` as it is:
    sync and with lookahead."""
    generate(target, [prompt], max_new_tokens=4)
    ar = generate(target, [prompt], max_new_tokens=new_tokens)
    ahead = generate(target, [prompt], max_new_tokens=new_tokens, lookahead=True)
    s = ar.stats
    return {"tok_s": s["tokens_per_s"], "step_ms": 1e3 * s["decode_s"] / s["rounds"],
            "tok_s_lookahead": ahead.stats["tokens_per_s"],
            "same_tokens_lookahead": ahead.tokens == ar.tokens,
            "gpu_step_ms": decode_graph_ms(target) if target.device.type == "cuda" else None,
            "tokens_head": ar.tokens[0][:16]}


def ablate(target, prompt: list[int], new_tokens: int, unsplit_width: int,
           repeats: int = 2, names: list[str] | None = None) -> dict:
    """Interleaved runs of VARIANTS (those in `names` when given) over `target.options`;
    returns {"variants": [...], "unsplit_width": ...}. The runs move `target`'s runtime
    (`Target.with_options`): `target` is left without one."""
    options = variant_options(target.options, unsplit_width, names)
    runs: dict[str, list[dict]] = {name: [] for name in options}
    current = target
    for _ in range(repeats):
        for name, opts in options.items():
            current = current.with_options(opts)
            runs[name].append(run_variant(current, prompt, new_tokens))
    table_width = current.runtime.pool.req_to_token.shape[1] if current.runtime else None
    rows = []
    for name, opts in options.items():
        r = runs[name]
        gpu = [x["gpu_step_ms"] for x in r if x["gpu_step_ms"] is not None]
        rows.append({"variant": name, "engine_options": opts.asdict(),
                     "tok_s": statistics.median(x["tok_s"] for x in r),
                     "tok_s_lookahead": statistics.median(x["tok_s_lookahead"] for x in r),
                     "step_ms": statistics.median(x["step_ms"] for x in r),
                     "gpu_step_ms": statistics.median(gpu) if gpu else None,
                     "runs": r})
    base = rows[0]
    for row in rows:
        row["tok_s_gain"] = row["tok_s"] / base["tok_s"] - 1
        if row["gpu_step_ms"] is not None:
            row["gpu_saving_us"] = 1e3 * (base["gpu_step_ms"] - row["gpu_step_ms"])
        row["same_tokens_as_first"] = (row["runs"][0]["tokens_head"]
                                       == base["runs"][0]["tokens_head"]
                                       and all(x["same_tokens_lookahead"] for x in row["runs"]))
    from kernels.gemv import tune

    return {"variants": rows, "unsplit_width": unsplit_width, "table_width": table_width,
            "repeats": repeats, "new_tokens": new_tokens,
            "gemv_configs": {str(k): str(v or "cuBLAS (timed faster)")
                             for k, v in tune.CONFIGS.items()},
            "gemv_tune_us": {str(k): v for k, v in tune.TUNE_LOG.items()}}


def print_ablation(a: dict) -> None:
    print(f"AR bs1 ablation: median of {a['repeats']} interleaved runs, {a['new_tokens']} new "
          f"tokens, table width W={a['table_width']}, attention rule W <= {a['unsplit_width']}")
    print(f"{'variant':<14} {'tok/s':>7} {'gain':>7} {'ms/step':>8} {'lookahead':>9} "
          f"{'GPU ms/step':>11} {'GPU saved us':>12}  same tokens")
    for r in a["variants"]:
        gpu = "-" if r["gpu_step_ms"] is None else f"{r['gpu_step_ms']:.3f}"
        saved = "-" if r["gpu_step_ms"] is None else f"{r['gpu_saving_us']:.0f}"
        print(f"{r['variant']:<14} {r['tok_s']:>7.1f} {r['tok_s_gain']:>+7.1%} "
              f"{r['step_ms']:>8.3f} {r['tok_s_lookahead']:>9.1f} {gpu:>11} {saved:>12}  "
              f"{r['same_tokens_as_first']}")
    for key, cfg in a.get("gemv_configs", {}).items():  # the tuned GEMV shapes
        times = a["gemv_tune_us"].get(key, {})
        mine = min((v for k, v in times.items() if k != "cublas" and v == v), default=None)
        if mine is not None and "cublas" in times:
            print(f"gemv (N, K, M, dtype, dev, graph-timed, cuBLAS fallback) {key}: {cfg} "
                  f"{mine:.1f} us, cuBLAS {times['cublas']:.1f} us")
