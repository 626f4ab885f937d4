"""Provenance of the published cells (experiments/published/cells.py): each cell's table,
row, the cell its value is derived from and the rounding of its printed value, with the
expected values worked out by hand from the printed tables (docs/dflash.md sections 4.3,
4.4 and 4.10, docs/sglang.md section 8)."""

from __future__ import annotations

import json

import pytest

from experiments.published.cells import HERE, load
from experiments.published.protocol import spec_cells
from experiments.published.scores import score
from experiments.published.transcription_diff import diff

L = "llama-3.1-8b"


def _get():
    return {(c.source, c.model, c.dataset, c.method, c.engine, c.concurrency): c
            for c in load().cells}


@pytest.mark.parametrize(
    ("key", "rounding"),
    [
        # Table 3, Qwen3-4B Math500 DFlash, printed 1531 tok/s
        (("dflash-table3", "qwen3-4b", "math500", "dflash", "sglang_v2", 1), 0.5 / 1531),
        # PR #23000 Spec V1 at c = 1, printed 845.98 tok/s
        (("sglang-pr23000", "qwen3-8b", "gsm8k", "dflash", "sglang_v1", 1), 0.005 / 845.98),
        # Table 5 Alpaca EAGLE-3 (60) at c = 32: speedup 0.5 times the baseline's 5434
        (("dflash-table5", L, "alpaca", "eagle3-60", "sglang_v1", 32), 0.05 / 0.5 + 0.5 / 5434),
        # Table 5 GSM8K DFlash at c = 1: 2.4 x 249
        (("dflash-table5", L, "gsm8k", "dflash", "sglang_v1", 1), 0.05 / 2.4 + 0.5 / 249),
        # Table 12 Math500 DFlash at c = 32, scored on its printed speedup 1.9
        (("dflash-table12", "qwen3.5-9b", "math500", "dflash", "vllm", 32), 0.05 / 1.9),
        # Table 12 Math500 baseline at c = 8: 5096 / 3.2
        (("dflash-table12", "qwen3.5-9b", "math500", "none", "vllm", 8), 0.5 / 5096 + 0.05 / 3.2),
    ],
)
def test_rounding_of_hand_picked_cells(key, rounding):
    assert _get()[key].rounding == pytest.approx(rounding, rel=1e-12)


def test_one_decimal_speedups_are_worth_up_to_ten_percent():
    cells = load().cells
    assert max(c.rounding for c in cells) == pytest.approx(0.1 + 0.5 / 5434)
    assert max(c.rounding for c in cells if c.source == "dflash-table3") < 0.5 / 220 + 1e-12


def test_derived_from_names_exactly_the_cells_read_off_another_ones_speedup():
    pub = load()
    ids = {c.id for c in pub.cells}
    derived = {c.id: c.derived_from for c in pub.cells if c.derived_from is not None}
    want = {}
    for d in ("gsm8k", "humaneval", "alpaca"):
        for m in ("eagle3-10", "eagle3-60", "dflash"):
            for c in (1, 4, 8, 16, 32):
                want[f"dflash-table5: llama-3.1-8b {d} {m} sglang_v1, c = {c}"] = (
                    f"dflash-table5: llama-3.1-8b {d} none sglang_v2, c = {c}")
    for d in ("math500", "humaneval", "mtbench"):
        for c in (1, 8, 16, 32):
            want[f"dflash-table12: qwen3.5-9b {d} none vllm, c = {c}"] = (
                f"dflash-table12: qwen3.5-9b {d} dflash vllm, c = {c}")
    assert derived == want
    assert set(derived.values()) <= ids
    assert all(c.derived == (c.id in want) for c in pub.cells)
    assert {c.table for c in pub.cells} == {
        "dflash-table3", "dflash-table5", "dflash-table12", "sglang-pr23000"}


def _row(doc, source, dataset, method):
    table = next(t for t in doc["tables"] if t["source"] == source and t["dataset"] == dataset)
    return next(r for r in table["rows"] if r["method"] == method)


def test_a_value_beyond_its_printed_decimals_or_without_them_is_an_error(tmp_path):
    doc = json.loads((HERE / "cells.json").read_text())
    _row(doc, "dflash-table3", "math500", "none")["tok_s"][0] = 316.5
    path = tmp_path / "cells.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="tok_s 316.5 has more than 0 decimals"):
        load(path)
    doc = json.loads((HERE / "cells.json").read_text())
    del _row(doc, "dflash-table5", "gsm8k", "dflash")["decimals"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="no decimals for speedup"):
        load(path)


def test_the_transcription_diff_compares_the_printed_decimals():
    first = json.loads((HERE / "cells.json").read_text())
    second = json.loads((HERE / "cells_second.json").read_text())
    _row(second, "sglang-pr23000", "gsm8k", "dflash")["decimals"]["tok_s"] = 1
    n, lines = diff(first, second)
    assert len(lines) == 2 and all("tok_s decimals: first 2, second 1" in x for x in lines)


def test_predictions_rows_carry_the_provenance():
    rows = json.loads((HERE / "predictions.json").read_text())
    cells = load().cells
    assert [(r["table"], r["row"], r["derived_from"]) for r in rows] == [
        (c.table, c.row, c.derived_from) for c in cells]
    assert [r["rounding"] for r in rows] == pytest.approx([c.rounding for c in cells], abs=1e-5)
    assert all(r["within_rounding"] == (abs(r["error"]) <= c.rounding)
               for r, c in zip(rows, cells, strict=True))


def test_scores_count_the_held_out_cells_within_rounding():
    """Every speculative cell off by +1%: within rounding exactly where the value comes from
    a one-decimal speedup (Table 5's 45 speculative cells, at least 0.05 / 2.8; Table 12's 12
    DFlash cells, at least 0.05 / 4.6), not for a printed tok/s (at most 0.5 / 569 here);
    the anchored scheme holds out all but c = 8 of those tables (9 and 3 cells)."""
    pub = load()
    cells = spec_cells(pub)
    target = [c.published_tok_s for c in cells]
    off = {"tok_s": [1.01 * t for t in target]}
    s = score(pub, cells, {"target_tok_s": target, "anchored": off, "baseline-only": off})
    assert s["baseline-only"]["within_rounding"] == 45 + 12
    assert s["anchored"]["within_rounding"] == 36 + 9
