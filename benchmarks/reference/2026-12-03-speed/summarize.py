"""summary.md of run.sh's outputs: each target of the speed issue beside what the run measured.

    python benchmarks/reference/2026-12-03-speed/summarize.py OUT   # reads OUT/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(out: Path, name: str) -> dict | None:
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _fmt(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}" if isinstance(x, float) else str(x)


def _met(value, goal) -> str:
    return "n/a" if value is None else ("yes" if value >= goal else "no")


def bench_lines(bench: dict) -> list[str]:
    """The engine bench's targets: bs-1 AR and DFlash at the requested tau, bs-16 DFlash."""
    rows = {r["bs"]: r for r in bench["rows"]}
    lines = ["## Engine bench (`bench.json`, workbench.bench, default EngineOptions)", "",
             "| target | goal | measured | met |", "| --- | --: | --: | :-: |"]
    one = rows.get(1)
    if one:
        lines += [
            f"| DFlash bs 1 sync, tok/s at tau {one['tau_requested']:.2f} (realized "
            f"{one['tau_realized']:.3f}) | 1,150 | {_fmt(one['at_tau']['at_tau_tok_s'])} | "
            f"{_met(one['at_tau']['at_tau_tok_s'], 1150)} |",
            f"| DFlash bs 1 lookahead (realized {one['tau_realized_lookahead']:.3f}) | 1,250 | "
            f"{_fmt(one['at_tau_lookahead']['at_tau_tok_s'])} | "
            f"{_met(one['at_tau_lookahead']['at_tau_tok_s'], 1250)} |",
            f"| AR bs 1 sync | 215 | {_fmt(one['ar_tok_s'])} | {_met(one['ar_tok_s'], 215)} |",
            f"| AR bs 1 lookahead | 237 | {_fmt(one['ar_lookahead_tok_s'])} | "
            f"{_met(one['ar_lookahead_tok_s'], 237)} |",
            f"| DFlash bs 1 round ms, lookahead | <= 5.2 | {one['round_ms_lookahead']:.2f} | "
            f"{'yes' if one['round_ms_lookahead'] <= 5.2 else 'no'} |"]
    big = rows.get(16)
    if big:
        lines += [f"| DFlash bs 16 static, sync (tau {big['tau_realized']:.3f}) | 9,000 | "
                  f"{_fmt(big['dflash_tok_s'])} | {_met(big['dflash_tok_s'], 9000)} |",
                  f"| DFlash bs 16 static, lookahead | 9,000 | "
                  f"{_fmt(big['dflash_lookahead_tok_s'])} | "
                  f"{_met(big['dflash_lookahead_tok_s'], 9000)} |"]
    lines += ["", "tok/s by the outside clock (perf_counter around `generate`, device "
              "synchronized; decode: the call less the same call at one new token) beside "
              "the engine's counters:", "",
              "| bs | run | decode, outside | decode, engine | whole call, outside | "
              "whole call, engine | outside / engine seconds |",
              "| --: | --- | --: | --: | --: | --: | --: |"]
    for bs, row in rows.items():
        for run, c in row["clock"].items():
            lines.append(f"| {bs} | {run} | {c['wall_decode_tok_s']:,.1f} | "
                         f"{c['engine_decode_tok_s']:,.1f} | {c['wall_tok_s']:,.1f} | "
                         f"{c['engine_tok_s']:,.1f} | {c['engine_over_wall']:.3f} |")
    lines += ["", "Every row lossless: " + str(all(r["lossless"] for r in bench["rows"])), ""]
    return lines


def tree_lines(tiles: dict | None, tall: dict | None) -> list[str]:
    """Tree N = 64 over the chain's tok/s (experiments.tree_engine), tall_tree off and on."""
    lines = ["## Trees (`tree_tiles.json`, `tree_tall.json`, experiments.tree_engine)", "",
             "| bs | N | goal (x chain) | tall_tree off | tall_tree on | met (on) |",
             "| --: | --: | --: | --: | --: | :-: |"]
    goals = {1: 1.25, 4: 1.10}

    def ratios(result):
        return {} if result is None else {(r["bs"], r["budget"]): r["vs_chain"]
                                          for r in result["rows"] if r["budget"]}
    off, on = ratios(tiles), ratios(tall)
    for key in sorted(set(off) | set(on)):
        goal = goals.get(key[0])
        lines.append(f"| {key[0]} | {key[1]} | {_fmt(goal, 2)} | {_fmt(off.get(key), 3)} | "
                     f"{_fmt(on.get(key), 3)} | "
                     f"{_met(on.get(key), goal) if goal else 'n/a'} |")
    return lines + [""]


def kernel_lines(micro: dict | None) -> list[str]:
    if micro is None:
        return []
    lines = ["## Tree attention alone (`tree_kernel.json`, kernels.paged_attention.tree_bench)",
             "", "| bs | N | chain us | tiles us | tall us | tall / tiles | tall / chain | "
             "max diff |", "| --: | --: | --: | --: | --: | --: | --: | --: |"]
    for r in micro["rows"]:
        lines.append(f"| {r['bs']} | {r['nodes']} | {r['chain_us']:.1f} | {r['tiles_us']:.1f} "
                     f"| {r['tall_us']:.1f} | {r['tall_over_tiles']:.3f} | "
                     f"{r['tall_over_chain']:.3f} | {r['max_abs_diff_tall_tiles']:.2e} |")
    return lines + [""]


def main(out: Path) -> str:
    bench = _load(out, "bench")
    first = bench or _load(out, "tree_kernel") or {}
    head = [f"# Speed at the requested acceptance: {first.get('gpu')}, "
            f"{first.get('git_sha')} ({first.get('date')})", ""]
    text = "\n".join(head + kernel_lines(_load(out, "tree_kernel"))
                     + (bench_lines(bench) if bench else ["(no bench.json)", ""])
                     + tree_lines(_load(out, "tree_tiles"), _load(out, "tree_tall")))
    (out / "summary.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
