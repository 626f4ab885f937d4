"""serve-bench's result document: overlap / sync ratios, the markdown table, the files.

serve_bench.json (stamped by workbench.results.write_json) and serve_bench.md are rewritten
atomically after every run, so a cut run keeps its finished rows; serve_bench.json's
`status` says "interrupted" until the last run is written, then "complete".
"""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = (("setup", "setup", "{}"), ("C", "concurrency", "{}"), ("method", "method", "{}"),
           ("mode", "mode", "{}"), ("tok/s", "throughput_tok_s", "{:.1f}"),
           ("TPOT ms", "tpot_ms", "{:.2f}"), ("p99 ms", "tpot_p99_ms", "{:.2f}"),
           ("TTFT ms", "ttft_ms", "{:.1f}"), ("tau", "tau", "{:.2f}"),
           ("idle", "gpu_idle_fraction", "{:.1%}"), ("round idle", "round_idle_fraction",
                                                      "{:.1%}"),
           ("round ms", "round_ms", "{:.2f}"), ("host ms", "host_ms_per_step", "{:.2f}"),
           ("prefill launch ms", "prefill_launch_ms", "{:.1f}"),
           ("prefill share", "prefill_share", "{:.0%}"),
           ("discard", "discarded_rows", "{}"), ("syncs", "implicit_syncs", "{}"),
           ("lossless", "lossless", "{}"))


def save(result: dict, out: str, status: str = "interrupted") -> None:
    """serve_bench.json and serve_bench.md (rewritten after every run: a cut run keeps its
    finished rows), with `status` ("interrupted" until the sweep's end, then "complete")."""
    from workbench.atomic import write_text
    from workbench.results import write_json

    result["status"] = status
    result["ratios"] = ratios(result["rows"])
    write_json(Path(out) / "serve_bench.json", result)
    write_text(Path(out) / "serve_bench.md", markdown(result))


def ratios(rows: list[dict]) -> list[dict]:
    """Overlap over sync throughput per (setup, concurrency, method)."""
    by = {(r["setup"], r["concurrency"], r["method"], r["mode"]): r for r in rows}
    out = []
    for (setup, conc, method, mode), r in by.items():
        sync = by.get((setup, conc, method, "sync"))
        if mode == "overlap" and sync is not None and sync["throughput_tok_s"] > 0:
            out.append({"setup": setup, "concurrency": conc, "method": method,
                        "overlap_over_sync": r["throughput_tok_s"] / sync["throughput_tok_s"]})
    return out


def markdown(result: dict) -> str:
    """The runs' table ('-' for a column an older result lacks) and the ratios."""
    meta = result.get("meta", {})
    env = result.get("env", {})  # results before the common stamp: gpu and versions here
    stamped = {"gpu": meta.get("gpu"), **meta.get("versions", {})}
    gpu, torch_v, triton_v = (stamped.get(k) or env.get(k) for k in ("gpu", "torch", "triton"))
    lines = [f"# serve-bench: {gpu}, torch {torch_v}, triton {triton_v}", "",
             "| " + " | ".join(h for h, _, _ in COLUMNS) + " |",
             "|" + "|".join(" --- " for _ in COLUMNS) + "|"]
    for r in result["rows"]:
        cells = (f.format(r[k]) if k in r else "-" for _, k, f in COLUMNS)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| setup | C | method | overlap / sync throughput |", "| --- | --- | --- | --- |"]
    lines += [f"| {q['setup']} | {q['concurrency']} | {q['method']} | "
              f"{q['overlap_over_sync']:.3f} |" for q in result["ratios"]]
    return "\n".join(lines) + "\n"


def show(result: dict) -> None:
    print(markdown(result))
    print(json.dumps(result))
