"""The printed report of `python -m reference.bench` (reference/bench.py)."""

from __future__ import annotations

import json


def print_stamp(r: dict) -> None:
    """The GPU and versions of a bench result."""
    v = r["versions"]
    print(f"{r['gpu']}  torch {v['torch']}  triton {v['triton']}")


def print_result(r: dict) -> None:
    """The table of `reference.bench`'s rows (bs, B), the overlap rounds' split, the bs-1
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
              f"{row['round_ms']:>8.2f}  {split:<42} {row['lossless']}")
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
              f"{row['dflash_lookahead_full_batch_tok_s']:.1f}")
    bs1 = r["rows"][0]
    print(f"AR bs{bs1['bs']}: {bs1['ar_tok_s'] / r['bound_tok_s']:.1%} (lookahead "
          f"{bs1['ar_lookahead_tok_s'] / r['bound_tok_s']:.1%}, same tokens "
          f"{bs1['ar_lookahead_same_tokens']}) of the {r['bound_tok_s']:.0f} tok/s "
          f"weight-streaming bound")
    print(json.dumps(r))
