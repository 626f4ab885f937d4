"""The plot and README.md of `python -m experiments.whatifs.drafter_memory`, from its rows
(throughput against the 3-layer drafter, running batch and TTFT; the KV pool per depth)."""

from __future__ import annotations

from experiments.whatifs.base import paragraph, pyplot, title
from simulator.params import SimConfig


def _tau(rows: list[dict], dataset: str, layers: int) -> float:
    """The tau a depth's rows were simulated at (`tau_set`)."""
    return next(
        r["tau_set"] for r in rows if r["dataset"] == dataset and r["draft_layers"] == layers
    )


def _color(layers: int, free: bool) -> str:
    """One colour per series in every panel."""
    return "C4" if free else {0: "C0", 3: "C1", 5: "C2", 8: "C3"}[layers]


def plot(rows: list[dict], cfg: SimConfig, ttft_s: float):
    """Per GPU: tokens/s over the shallowest drafter's per dataset, mean running requests and
    mean TTFT (the line at `ttft_s`); `cfg` names the setting in the title."""
    plt = pyplot()
    hws = list(dict.fromkeys(r["hardware"] for r in rows))
    dss = list(dict.fromkeys(r["dataset"] for r in rows if r["draft_layers"]))
    fig, axes = plt.subplots(
        len(hws), len(dss) + 2, figsize=(4.6 * (len(dss) + 2), 3.9 * len(hws) + 0.6), squeeze=False
    )
    tok = {
        (r["hardware"], r["dataset"], r["draft_layers"], r["memory_free"], r["concurrency"]): r
        for r in rows
    }
    cs = sorted({r["concurrency"] for r in rows})
    for i, hw in enumerate(hws):
        for j, ds in enumerate(dss):
            ax = axes[i, j]
            series = sorted(
                {
                    (r["draft_layers"], r["memory_free"])
                    for r in rows
                    if r["hardware"] == hw and r["dataset"] == ds and r["draft_layers"]
                }
            )
            shallow = series[0][0]
            for L, free in series:
                ratio = [
                    tok[hw, ds, L, free, c]["output_tok_s"]
                    / tok[hw, ds, shallow, False, c]["output_tok_s"]
                    for c in cs
                ]
                label = f"{L} layers (tau {_tau(rows, ds, L):.2f})" + (
                    ", memory free" if free else ""
                )
                ax.plot(
                    cs,
                    ratio,
                    "--" if free else "-",
                    marker="o",
                    ms=3,
                    label=label,
                    color=_color(L, free),
                )
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(
                xscale="log",
                xlabel="concurrency",
                title=f"{hw}, {ds}",
                ylabel=f"tokens/s over the {shallow}-layer drafter's",
            )
            ax.legend(fontsize=7)
        series = sorted(
            {
                (r["draft_layers"], r["memory_free"])
                for r in rows
                if r["hardware"] == hw and r["dataset"] == dss[0]
            }
        )
        for col, metric, name in (
            (-2, "running_mean", "mean running requests"),
            (-1, "ttft_s", "mean TTFT, s"),
        ):
            ax = axes[i, col]
            for L, free in series:
                y = [tok[hw, dss[0], L, free, c][metric] for c in cs]  # no speculation: dss[0]
                ax.plot(
                    cs,
                    y,
                    "--" if free else "-",
                    marker="o",
                    ms=3,
                    color=_color(L, free),
                    label="no speculation"
                    if L == 0
                    else f"{L} layers" + (", memory free" if free else ""),
                )
            ax.set(
                xscale="log",
                yscale="log",
                xlabel="concurrency",
                ylabel=name,
                title=f"{hw}, {dss[0]}: KV pool and queueing",
            )
            ax.legend(fontsize=7)
        axes[i, -1].axhline(ttft_s, color="grey", lw=0.8)
    fig.suptitle(
        title(cfg, "Drafter depth against the KV pool: DFlash B = 16")
        .replace("h200", "h200 / h100")
        .replace(", humaneval", ", HumanEval and MT-Bench tau"),
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def readme(
    rows: list[dict], budget: dict, cross: list[dict], queue: list[dict], ttft_s: float
) -> str:
    """README.md: the setting, the KV pool per depth and the reading."""
    cmax = max(r["concurrency"] for r in rows)
    q = {(x["hardware"], x["dataset"], x["draft_layers"], x["memory_free"]): x for x in queue}
    pair = {(x["hardware"], x["dataset"]): x for x in cross if (x["shallow"], x["deep"]) == (3, 8)}
    cost = [abs(v) for x in cross for v in x["memory_cost"].values()]

    def ratios(ds):
        vals = [v for (hw, d), x in pair.items() if d == ds for v in x["ratio"].values()]
        return f"{100 * (min(vals) - 1):+.0f}..{100 * (max(vals) - 1):+.0f}%"

    def onset(hw, L, free=False):
        c = q[hw, "humaneval", L, free]["queues_from_c"]
        return f"c = {c}" if c else f"beyond c = {cmax}"

    def run(hw, L, free=False):
        return q[hw, "humaneval", L, free]["running_at_cmax"]

    pool = "\n".join(
        f"| {hw} | "
        + " / ".join(f"{budget[hw][L]['capacity_tokens']:,}" for L in sorted(budget[hw]))
        + f" | {run(hw, 0):.0f} / {run(hw, 3):.0f} / {run(hw, 8):.0f} / {run(hw, 8, True):.0f} |"
        for hw in budget
    )
    b8 = budget["h200"][8]
    reading = f"""Reading. An 8-layer drafter of Qwen3-8B's shape holds
        {b8["draft_weights_gb"]:.1f} GB of weights and {b8["draft_kv_bytes_per_token"] / 1e3:.1f}
        KB of draft KV per token (the target holds {b8["target_kv_bytes_per_token"] / 1e3:.1f}
        KB), so it shrinks the KV pool by
        {100 * (1 - b8["capacity_tokens"] / budget["h200"][0]["capacity_tokens"]):.0f}% on an
        H200 and {
        100
        * (
            1 - budget["h100"][8]["capacity_tokens"] / budget["h100"][0]["capacity_tokens"]
        ):.0f}% on an H100, and the
        running batch the pool admits falls with it. That is where a deeper drafter stops
        paying: requests start waiting for KV room (mean TTFT past {ttft_s:g} s) from
        {onset("h100", 8)} on the H100 with 8 layers, against {onset("h100", 3)} with 3
        layers and {onset("h100", 8, True)} with the drafter's memory free (H200:
        {onset("h200", 8)}, {onset("h200", 3)}, {onset("h200", 8, True)}). Throughput does not
        show it: at these batches the B = 16 verify is compute-bound, so fewer running
        requests finish as many tokens per second, and the drafter's memory moves throughput
        by at most {100 * max(cost):.1f}%. What depth does to throughput is acceptance
        against compute: on HumanEval the 8-layer drafter's tau gain over 3 layers (Table 6:
        {100 * (_tau(rows, "humaneval", 8) / _tau(rows, "humaneval", 3) - 1):.0f}%) beats its extra
        compute ({ratios("humaneval")} tokens/s over all concurrencies), on MT-Bench
        ({100 * (_tau(rows, "mtbench", 8) / _tau(rows, "mtbench", 3) - 1):.0f}%) it does not
        ({ratios("mtbench")})."""
    return f"""# Drafter memory: where a deeper drafter stops paying

    python -m experiments.whatifs.drafter_memory

DFlash B = 16 drafters of 3, 5 and 8 Qwen3-8B-shaped layers (tau from the DFlash paper's
Table 6 ratios), 1K-token prompts and 2K-token outputs, overlap engine, roofline costs,
closed loop (conf/experiment/whatif_drafter_memory.yaml), on an H200 and an H100. The
8-layer drafter also runs with its memory made free (hardware.memory_gb raised by its
weights and draft KV). drafter_memory.png: tokens/s over the 3-layer drafter's (HumanEval,
MT-Bench), mean running requests and mean TTFT against concurrency.

| GPU | KV pool, tokens: none / 3 / 5 / 8 layers | running at c = {cmax}: none / 3 / 8 / 8 free |
| --- | --- | --- |
{pool}

{paragraph(reading)}
"""
