"""What `python -m workbench.bench` (workbench/bench/decode.py) derives from its runs, and prints:
the full-batch rate and round split, the table, the JSON line."""

from __future__ import annotations

import json

from reference.engine import PHASES

TAU_TOLERANCE = 0.01  # a row's realized tau within 1% of the requested one


def clock_check(out, seconds: float, first_seconds: float) -> dict:
    """A run's tok/s by the outside clock beside the engine's counters (`out`: its
    GenerateOutput; `seconds`, `first_seconds`: the outside clock's whole call and the same
    call at one new token, decode.timed_generate). Whole call: every new token over
    `seconds` (wall_tok_s) and over the engine's prefill_s + decode_s (engine_tok_s), and
    engine_over_wall = seconds / (prefill_s + decode_s); decode: the tokens after each
    request's first over seconds - first_seconds (wall_decode_tok_s) and the engine's
    tokens_per_s (engine_decode_tok_s), the same tokens over its decode_s."""
    engine_s = out.stats["prefill_s"] + out.stats["decode_s"]
    tokens = out.stats["new_tokens"]
    decode = tokens - len(out.tokens)
    return {"wall_s": seconds, "wall_tok_s": tokens / max(seconds, 1e-12),
            "engine_tok_s": tokens / max(engine_s, 1e-12),
            "engine_over_wall": seconds / max(engine_s, 1e-12),
            "wall_decode_tok_s": decode / max(seconds - first_seconds, 1e-12),
            "engine_decode_tok_s": out.stats["tokens_per_s"]}


def at_tau(tok_s: float, requested: float, realized: float) -> dict:
    """tok/s at the requested tau: the measured rate scaled by requested / realized when the
    realized tau is within TAU_TOLERANCE of it, else None and flagged (tau_ok False)."""
    ok = abs(realized / requested - 1) <= TAU_TOLERANCE
    return {"tau_ok": ok, "at_tau_tok_s": tok_s * requested / realized if ok else None}


def full_batch_tok_s(out, n: int) -> float:
    """Tokens committed per second over the leading rounds of `out` (a GenerateOutput of n
    requests) in which all n requests were live: F rounds, the commits of each request's
    first F rounds over those rounds' wall seconds (`stats["round_times"]`). In overlap
    rounds a round launched after a request's end counts its time and no tokens."""
    rounds = out.stats["round_times"]
    full = _full_rounds(rounds, n)
    seconds = sum(r[1] for r in rounds[:full])
    return sum(sum(c[:full]) for c in out.accept_lengths) / max(seconds, 1e-12)


def _full_rounds(rounds: list, n: int) -> int:
    """F: the leading rounds of `round_times` in which all n requests were live."""
    return next((i for i, r in enumerate(rounds) if r[0] < n), len(rounds))


def full_batch_split_ms(out, n: int) -> dict[str, float]:
    """The mean ms per round of each phase (PHASES, device time) over the same leading
    full-batch rounds as `full_batch_tok_s`, and `host`: the rest of their wall. Against
    the phases replayed alone (workbench.bench.phases --batch-size n) it says whether a
    full round in the run is slower on the device or on the host."""
    rounds = out.stats["round_times"][: max(_full_rounds(out.stats["round_times"], n), 1)]
    split = {p: 1e3 * sum(r[2 + i] for r in rounds) / len(rounds)
             for i, p in enumerate(PHASES)}
    # overlap rounds: a round's device phases may outlast its wall (as generate's host time)
    split["host"] = 1e3 * sum(max(r[1] - sum(r[2:]), 0.0) for r in rounds) / len(rounds)
    return split


def _schedule(row: dict) -> str:
    """The row's verify schedule, as a suffix of its printed lines ('' without one)."""
    return f"  schedule {row['verify_schedule']}" if row.get("verify_schedule") else ""


def print_stamp(r: dict) -> None:
    """The GPU and versions of a bench result."""
    v = r["versions"]
    print(f"{r['gpu']}  torch {v['torch']}  triton {v['triton']}")


def print_result(r: dict) -> None:
    """The table of `workbench.bench`'s rows (bs, B), the overlap rounds' split, the bs-1
    AR bound, then the result as one JSON line."""
    print_stamp(r)
    if "hf_tok_s" in r:
        print(f"transformers generate bs1: {r['hf_tok_s']:.1f} tok/s "
              f"(same greedy tokens: {r.get('hf_matches_engine')})")
    print(f"{'bs':>4} {'B':>3} {'AR tok/s':>9} {'AR ahead':>9} {'DFlash tok/s':>12} {'ahead':>7} "
          f"{'tau':>5} {'eff':>5} "
          f"{'speedup':>7} {'round ms':>8}  split ms (draft/verify/accept/inject/host)  "
          f"lossless")
    for row in r["rows"]:
        split = "/".join(f"{v:.2f}" for v in row["split_ms"].values())
        print(f"{row['bs']:>4} {row['block']:>3} {row['ar_tok_s']:>9.1f} "
              f"{row['ar_lookahead_tok_s']:>9.1f} "
              f"{row['dflash_tok_s']:>12.1f} {row.get('dflash_lookahead_tok_s', 0):>7.1f} "
              f"{row['tau']:>5.2f} {row['round_efficiency']:>5.1%} {row['speedup']:>6.2f}x "
              f"{row['round_ms']:>8.2f}  {split:<42} {row['lossless']}"
              + _schedule(row))
    print("per round, ms: the split of overlap rounds; the host's time to enqueue each phase "
          "(draft/verify/accept/inject), sync and overlap rounds; DFlash tok/s while every "
          "request is live, sync / overlap")
    for row in r["rows"]:
        cells = [row["split_ms_lookahead"], row["enqueue_ms"], row["enqueue_ms_lookahead"]]
        text = ["/".join(f"{v:.2f}" for v in c.values()) for c in cells]
        print(f"{row['bs']:>4} {row['block']:>3} overlap {row['round_ms_lookahead']:.2f} = "
              f"{text[0]}   "
              f"enqueue sync {text[1]}   overlap {text[2]}   full batch "
              f"{row['dflash_full_batch_tok_s']:.1f} / "
              f"{row['dflash_lookahead_full_batch_tok_s']:.1f} (its overlap rounds: "
              + "/".join(f"{v:.2f}" for v in row["full_batch_split_ms_lookahead"].values())
              + ")" + _schedule(row))
    print("tau requested / realized (sync, lookahead); tok/s at the requested tau (sync, "
          "lookahead; '-' where the realized tau is off by more than 1%); decode tok/s by the "
          "outside clock / the engine's counters (AR, AR ahead, DFlash, ahead)")
    for row in r["rows"]:
        cells = [row["at_tau"]["at_tau_tok_s"], row["at_tau_lookahead"]["at_tau_tok_s"]]
        at = " / ".join("-" if c is None else f"{c:.1f}" for c in cells)
        clocks = "  ".join(f"{c['wall_decode_tok_s']:.1f}/{c['engine_decode_tok_s']:.1f}"
                           for c in row["clock"].values())
        print(f"{row['bs']:>4} {row['block']:>3} tau {row['tau_requested']:.3f} / "
              f"{row['tau_realized']:.3f}, {row['tau_realized_lookahead']:.3f}   at tau {at}"
              f"   clock {clocks}" + _schedule(row))
    bs1 = r["rows"][0]
    print(f"AR bs{bs1['bs']}: {bs1['ar_tok_s'] / r['bound_tok_s']:.1%} (lookahead "
          f"{bs1['ar_lookahead_tok_s'] / r['bound_tok_s']:.1%}, same tokens "
          f"{bs1['ar_lookahead_same_tokens']}) of the {r['bound_tok_s']:.0f} tok/s "
          f"weight-streaming bound")
    print(json.dumps(r))
