"""experiments.tree_engine on the CPU (tiny preset): the engine option flags reach the
measured target and the record, and --early-loads holds for every measured forward and
round, the tall-tile rows included (their `forced` blocks must not reset it); --pairs
records each plain tree row's alternated ratios."""

from __future__ import annotations

import json

import experiments.tree_engine as tree_engine
from kernels.paged_attention import rules


def test_flags_reach_every_row_and_the_record(tmp_path, monkeypatch):
    seen = []
    for name in ("_forward", "_round", "_paired"):
        real = getattr(tree_engine, name)

        def spy(*args, real=real, **kwargs):
            seen.append(rules.EARLY_LOADS)
            return real(*args, **kwargs)

        monkeypatch.setattr(tree_engine, name, spy)
    out = tmp_path / "tree.json"
    tree_engine.main(["--device", "cpu", "--preset", "tiny", "--batch-sizes", "1",
                      "--budgets", "16", "--reps", "1", "--context", "32", "--tall-tiles",
                      "128x8", "--fused-merge", "--early-loads", "--pairs", "3",
                      "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["engine_options"]["fused_merge"] is True and r["args"]["early_loads"] is True
    assert [row["what"] for row in r["rows"]] == ["chain", "N=16", "N=16 128x8"]
    assert len(seen) == 2 + 2 + 3 + 1 and all(seen)  # AR, chain, 2 trees; 3 rounds; pairs
    assert rules.EARLY_LOADS is None  # the rule again after the run
    pairs = [row.get("forward_pairs") for row in r["rows"]]
    assert pairs[0] is None and pairs[2] is None  # the chain, a tall-tile row
    q = pairs[1]
    assert len(q["ratios"]) == 3 and all(x > 0 for x in q["ratios"])
    assert q["min"] <= q["median"] <= q["max"] and sorted(q["ratios"])[1] == q["median"]
