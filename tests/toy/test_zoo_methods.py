"""The zoo comparisons (experiments.prompt_lookup, experiments.tree_budget) end to end at
tiny size: every method lossless, the files written, tree ratios over the chain's tau."""

from __future__ import annotations

import json

from experiments import prompt_lookup, tree_budget


def test_prompt_lookup_and_tree_budget_run(tmp_path):
    assert prompt_lookup.main(["--num-prompts", "2", "--max-new-tokens", "12",
                               "--out", str(tmp_path / "pl")]) == 0
    rows = json.loads((tmp_path / "pl" / "results.json").read_text())["rows"]
    assert [r["method"] for r in rows][2] == "prompt lookup B = 8"
    assert all(r["lossless"] for r in rows)
    replay = json.loads((tmp_path / "pl" / "replay_prompt_lookup_b8.json").read_text())
    assert len(replay) == 2 and all(1 <= c <= 8 for cs in replay for c in cs)
    assert tree_budget.main(["--num-prompts", "2", "--max-new-tokens", "12", "--budgets", "5",
                             "--out", str(tmp_path / "tb")]) == 0
    rows = json.loads((tmp_path / "tb" / "results.json").read_text())["rows"]
    assert all(r["lossless"] for r in rows) and rows[0]["vs_chain"] == 1.0
    assert rows[1]["vs_chain"] == rows[1]["tau"] / rows[0]["tau"]
    for r in rows:  # 12 new tokens: every round starts before output position 64
        assert r["pos_tau"][0] == r["tau"] and r["pos_tau"][1] != r["pos_tau"][1]  # nan
    text = (tmp_path / "tb" / "results.md").read_text()
    assert "| tau [0, 64) | tau [64, 12) |" in text
