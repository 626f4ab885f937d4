"""The two transcriptions of the published tables (experiments/published/cells.json and
cells_second.json) agree cell by cell, and the diff tool catches an altered, a missing and a
relabelled cell."""

from __future__ import annotations

import json

from experiments.published.transcription_diff import HERE, diff, main

# Cells per source, counted from docs/dflash.md section 4 and docs/sglang.md section 8:
# Table 3, 7 model/task pairs x (baseline, DFlash) x 5 concurrencies; Table 5, 3 tasks x
# (baseline, EAGLE-3 10, EAGLE-3 60, DFlash) x 5; Table 12, 3 tasks x (derived baseline,
# DFlash) x 4; PR #23000, (Spec V1, Spec V2) x 2; vLLM PR #36767, (vLLM, SGLang) x 4.
CELLS = 7 * 2 * 5 + 3 * 4 * 5 + 3 * 2 * 4 + 2 * 2 + 2 * 4


def _docs():
    return (
        json.loads((HERE / "cells.json").read_text()),
        json.loads((HERE / "cells_second.json").read_text()),
    )


def _table(doc, source, dataset):
    return next(t for t in doc["tables"] if t["source"] == source and t["dataset"] == dataset)


def test_committed_transcriptions_agree(capsys):
    first, second = _docs()
    n, lines = diff(first, second)
    assert (n, lines) == (CELLS, [])
    assert main([]) == 0
    assert "0 disagreements" in capsys.readouterr().out


def test_an_altered_cell_is_caught(tmp_path, capsys):
    first, second = _docs()
    row = next(
        r for r in _table(second, "dflash-table5", "gsm8k")["rows"] if r["method"] == "dflash"
    )
    published = row["speedup"][2]  # c = 8 of Table 5's GSM8K DFlash row
    row["speedup"][2] = round(published + 0.1, 1)
    altered = tmp_path / "cells_second.json"
    altered.write_text(json.dumps(second))
    assert main([str(HERE / "cells.json"), str(altered)]) == 1
    key = ("dflash-table5", "llama-3.1-8b", "gsm8k", "dflash", "sglang_v1", "dflash-llama", 8)
    assert capsys.readouterr().out.splitlines() == [
        f"disagree {key} speedup: first {published!r}, second {round(published + 0.1, 1)!r}",
        f"{CELLS} cells in both transcriptions, 1 disagreements or missing cells",
    ]


def test_a_missing_or_relabelled_row_is_caught():
    first, second = _docs()
    _table(second, "sglang-pr23000", "gsm8k")["rows"].pop()
    n, lines = diff(first, second)
    assert n == CELLS - 2 and len(lines) == 2
    assert all(line.startswith("only in first: ('sglang-pr23000'") for line in lines)
    first, second = _docs()
    _table(second, "vllm-pr36767", "gsm8k")["rows"][0]["engine"] = "sglang_v1"
    n, lines = diff(first, second)
    assert n == CELLS - 4 and len(lines) == 8
    assert sum(line.startswith("only in second: ") for line in lines) == 4


def test_a_scalar_tau_stands_for_every_column():
    first, second = _docs()
    table = _table(first, "vllm-pr36767", "gsm8k")
    for row in table["rows"]:
        row["tau"] = [row["tau"]] * len(table["concurrency"])
    assert diff(first, second) == (CELLS, [])
    table["rows"][0]["tau"][-1] += 0.01
    assert len(diff(first, second)[1]) == 1
