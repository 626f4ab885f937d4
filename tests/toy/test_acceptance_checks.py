"""The paper-ordering checks of experiments/acceptance_checks.py on hand-made rows."""

from __future__ import annotations

from experiments.acceptance_checks import checks_markdown, paper_checks


def _row(drafter, tau, train_b=16, test_b=16, draft_ms=1.0, split="test", temp=0.0):
    return {"drafter": drafter, "tau": tau, "train_B": train_b, "test_B": test_b,
            "split": split, "T": temp, "draft_ms_per_round": draft_ms}


def test_ablation_orderings_hold_and_fail_as_the_numbers_say():
    rows = [_row("ablations/full", 4.0), _row("ablations/fusion", 3.0),
            _row("ablations/ar", 3.5, draft_ms=5.0), _row("ablations/no-features", 3.5),
            _row("ablations/eagle", 4.4, draft_ms=0.5),
            _row("ablations/full", 1.0, temp=1.0), _row("ablations/fusion", 9.0, split="val")]
    got = {claim: ok for claim, _, ok in paper_checks(rows)}
    assert got == {"table 9: KV injection > input fusion": True,
                   "table 9: DFlash-AR (sequential) > parallel block in tau": False,
                   "table 10: target features >> none": False,  # 4.0 / 3.5 < 1.2
                   "block drafter drafts a round faster than ablations/ar": True,
                   "block drafter drafts a round faster than ablations/eagle": False}
    md = checks_markdown(rows)
    assert "DOES NOT HOLD: table 9: DFlash-AR (sequential) > parallel block in tau (tau 3.50 " \
        "vs 4.00" in md
    assert "holds: block drafter drafts a round faster than ablations/ar (draft 1.00 vs " \
        "5.00 ms per round)" in md


def test_other_depths_are_checked_against_their_own_depth():
    """ablations/<name>-l<N>-b<B> (toy.ablations --layers N --block B) pair only
    with drafters of the same setting."""
    rows = [_row("ablations/full", 4.0), _row("ablations/fusion", 5.0),
            _row("ablations/full-l5", 6.0), _row("ablations/fusion-l5", 5.5),
            _row("ablations/no-features-l5", 3.0), _row("ablations/uniform-l3", 2.0),
            {**_row("ablations/full-l5-b8", 4.0, 8, 8), "speedup": 2.0},
            {**_row("ablations/fusion-l5-b8", 4.5, 8, 8), "speedup": 1.5},
            _row("ablations/no-decay-b8", 3.0, 8, 8), _row("ablations/full-b8", 3.0, 8, 8)]
    got = {claim: ok for claim, _, ok in paper_checks(rows)}
    assert got == {"table 9: KV injection > input fusion": False,
                   "table 9: KV injection > input fusion (5-layer drafters)": True,
                   "table 10: target features >> none (5-layer drafters)": True,
                   "table 9: KV injection > input fusion (5-layer drafters, B = 8)": False,
                   "table 9: KV injection decodes faster than input fusion (5-layer drafters, "
                   "B = 8)": True,
                   "figure 5: decayed loss > flat loss (B = 8)": False}


def test_block_size_asymmetry_and_latency_shape():
    rows = [_row("dflash-b16", 3.0, 16, 8), _row("dflash-b8", 3.2, 8, 8),
            _row("dflash-b8", 3.0, 8, 16), _row("dflash-b16", 4.5, 16, 16),
            _row("dflash-b16", 2.0, 16, 4, draft_ms=1.0),
            _row("dflash-b16", 4.0, 16, 32, draft_ms=1.2),
            _row("ablations/ar", 2.0, 16, 4, draft_ms=0.5),
            _row("ablations/ar", 3.0, 16, 32, draft_ms=4.0)]
    got = {claim: ok for claim, _, ok in paper_checks(rows)}
    assert got["table 8: train 16 -> test 8 holds up better than train 8 -> test 16"]
    assert got["figure 3: dflash-b16 draft time is flat in B"]
    assert got["figure 3: ablations/ar draft time grows in B"]
    assert checks_markdown([_row("other", 2.0)]) == ""


def test_rewrite_replaces_the_orderings_from_the_csv(tmp_path):
    from experiments.acceptance_checks import HEADING, rewrite

    fields = ["drafter", "train_B", "test_B", "split", "T", "tau", "draft_ms_per_round",
              "speedup"]
    lines = [",".join(fields), "ablations/full,16,16,test,0.0,4.0,1.0,1.5",
             "ablations/fusion,16,16,test,0.0,3.0,1.0,1.75"]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "results.md").write_text("| table |\n" + HEADING + "\n- stale claim\n")
    rewrite(tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("| table |\n")
    assert "stale" not in text
    assert "holds: table 9: KV injection > input fusion (tau 4.00 vs 3.00 (x1.33))" in text
    assert "DOES NOT HOLD: table 9: KV injection decodes faster than input fusion (speedup " \
        "1.50x vs 1.75x)" in text


def test_tau_orderings_carry_their_noise_when_rows_have_standard_errors():
    rows = [{**_row("ablations/full", 5.7), "tau_se": 0.3},
            {**_row("ablations/fusion", 5.9), "tau_se": 0.4}]
    (claim, nums, ok), = paper_checks(rows)
    assert not ok and nums == "tau 5.70 vs 5.90 (x0.97, difference -0.20 +- 1.00 at 2 SE)"
