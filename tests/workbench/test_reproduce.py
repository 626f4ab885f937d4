"""`python -m workbench reproduce`: the holds rules on hand-computed cases and the paper's own
numbers, the published-prediction switch, the CLI, and the committed report.

The rules' expected verdicts come from the papers (a rule must pass the paper's own table)
or from hand-built cases whose answer is plain; the committed report must list every entry.
"""

from __future__ import annotations

import json

import pytest

from workbench.reproduce import cli as reproduce
from workbench.reproduce import data as reproduce_data
from workbench.reproduce import entry as reproduce_entry
from workbench.reproduce import sim as reproduce_sim

REPORT = reproduce_entry.ROOT / "experiments" / "reproduce"


def test_falls_compares_the_last_concurrency_with_the_first():
    # DFlash Table 3, Qwen3-8B Math500: 5.1 at c = 1 down to 2.8 at c = 32 (keys unsorted).
    assert reproduce_sim.falls({32: 2.8, 1: 5.1, 8: 4.5})
    assert not reproduce_sim.falls({1: 1.0, 32: 1.0})
    assert not reproduce_sim.falls({1: 1.2, 64: 1.3})


def test_block_ratios_on_the_papers_table8_pass_the_rule():
    """Table 8 (Math500): b16->b8 5.09, b8->b8 5.21, b8->b16 5.02, b16->b16 6.33."""
    tau = {
        ("dflash-b16", 8): 5.09,
        ("dflash-b8", 8): 5.21,
        ("dflash-b8", 16): 5.02,
        ("dflash-b16", 16): 6.33,
    }
    down, up = reproduce_data.block_ratios(tau)
    assert down == pytest.approx(5.09 / 5.21) and up == pytest.approx(5.02 / 6.33)
    assert down >= 0.9 and down > up


def test_budget_margins_pair_each_point_with_its_best_fixed_run():
    rows = [
        # c = 32, seed 0: fixed best 100, budget best 110 -> +10%
        {
            "dataset": "h",
            "concurrency": "32",
            "seed": "0",
            "level": "fixed",
            "throughput_tok_s": "90",
        },
        {
            "dataset": "h",
            "concurrency": "32",
            "seed": "0",
            "level": "fixed",
            "throughput_tok_s": "100",
        },
        {
            "dataset": "h",
            "concurrency": "32",
            "seed": "0",
            "level": "AUC~0.9",
            "throughput_tok_s": "110",
        },
        {
            "dataset": "h",
            "concurrency": "32",
            "seed": "0",
            "level": "uninformative",
            "throughput_tok_s": "500",
        },
        # c = 64, seed 1: 95 against 100 -> -5%
        {
            "dataset": "h",
            "concurrency": "64",
            "seed": "1",
            "level": "fixed",
            "throughput_tok_s": "100",
        },
        {
            "dataset": "h",
            "concurrency": "64",
            "seed": "1",
            "level": "AUC~0.9",
            "throughput_tok_s": "95",
        },
        # c = 16 is below the range: ignored
        {
            "dataset": "h",
            "concurrency": "16",
            "seed": "0",
            "level": "AUC~0.9",
            "throughput_tok_s": "999",
        },
    ]
    assert sorted(reproduce_data.budget_margins(rows, "AUC~0.9")) == pytest.approx([-0.05, 0.10])


def test_a_committed_prediction_file_replaces_the_simulator(tmp_path, monkeypatch):
    """Table 3's rows in experiments/published/predictions.json are read instead of
    simulating: each method's predicted tok/s over the no-speculation row's at the same
    point; a model outside the claim (the MoE target) is left out; the falling curves decide
    the verdict, and the data column names the file."""
    path = tmp_path / reproduce_sim.PUBLISHED
    path.parent.mkdir(parents=True)

    def row(model, method, c, tok_s, source="dflash-table3"):
        return {"source": source, "model": model, "hardware": "b200", "engine": "sglang_v2",
                "dataset": "math500", "method": method, "concurrency": c,
                "predicted_tok_s": tok_s, "published_tok_s": 1.0}

    rows = [row("qwen3-8b", "none", 1, 100.0), row("qwen3-8b", "dflash", 1, 400.0),
            row("qwen3-8b", "none", 32, 1000.0), row("qwen3-8b", "dflash", 32, 2500.0),
            row("qwen3-coder-30b-a3b", "none", 1, 100.0),
            row("qwen3-coder-30b-a3b", "dflash", 1, 200.0),
            row("qwen3-coder-30b-a3b", "none", 32, 100.0),
            row("qwen3-coder-30b-a3b", "dflash", 32, 300.0),
            row("x", "dflash", 1, 9.0, source="dflash-table5")]
    path.write_text(json.dumps(rows))
    monkeypatch.setattr(reproduce_sim, "ROOT", tmp_path)
    monkeypatch.setattr(reproduce_sim, "sweep", lambda *a: pytest.fail("simulated"))
    out = reproduce_sim.table3()
    assert out.holds is True and reproduce_sim.PUBLISHED in out.data
    assert out.command == "python -m experiments.published"  # what writes the file
    assert "qwen3-8b math500 dflash: 4.00 / 2.50x" in out.value
    assert "coder" not in out.value
    assert reproduce_sim.published_speedups("12") is None


def test_select_keeps_report_order_and_names_an_unknown_entry():
    entries = reproduce.entries()
    assert len({e.name for e in entries}) == len(entries) == 16
    picked = reproduce.select(entries, ["figure3", "table8"])
    assert [e.name for e in picked] == ["table8", "figure3"]
    with pytest.raises(ValueError, match="nope"):
        reproduce.select(entries, ["nope"])


def test_cli_runs_committed_data_entries_into_out(tmp_path, capsys):
    assert reproduce.main(["--only", "table10", "table9-tau", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] table9-tau: no") and lines[1].startswith("[2/2] table10: yes")
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["name"] for r in report["rows"]] == ["table9-tau", "table10"]
    # Table 10 on the toy: 4.94 with features vs 3.79 without (the ablations' results.csv).
    assert "4.94 vs 3.79" in report["rows"][1]["value"]
    assert "Holds: 1 of 2 rows" in (tmp_path / "report.md").read_text()
    assert reproduce.main(["--only", "nope"]) == 2


def test_the_committed_report_lists_every_entry_and_its_runtime():
    report = json.loads((REPORT / "report.json").read_text())
    assert [r["name"] for r in report["rows"]] == [e.name for e in reproduce.entries()]
    assert all(r["holds"] in (True, False, None) for r in report["rows"])
    assert report["header"]["wall_s"] < 600
    md = (REPORT / "report.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == len(report["rows"]) + 2  # header, separator, one row per entry


def test_toy_headline_quotes_tau_overall_low_repetition_and_by_position(tmp_path, monkeypatch):
    """A results.csv row written by hand: every number of the sentence is that row's, with
    2 SE = twice the row's SE (the B = 8 and T = 1 rows are other cells, not quoted)."""
    cols = ["drafter", "split", "T", "prompts", "tau", "tau_se", "tau_low_rep",
            "tau_low_rep_se", "low_rep_requests", "tau_pos0_64", "tau_pos0_64_se",
            "tau_pos64_256", "tau_pos64_256_se"]
    rows = [["dflash-b8", "test", "0.0", "9", "9", "1", "9", "1", "9", "9", "1", "9", "1"],
            ["dflash-b16", "test", "1.0", "9", "8", "1", "8", "1", "8", "8", "1", "8", "1"],
            ["dflash-b16", "test", "0.0", "1024", "3.5", "0.05", "3.25", "0.4", "42", "2.4",
             "0.03", "4.75", "0.1"]]
    (tmp_path / "acc").mkdir()
    (tmp_path / "acc" / "results.csv").write_text(
        "\n".join(",".join(r) for r in [cols, *rows]) + "\n")
    monkeypatch.setattr(reproduce_data, "ROOT", tmp_path)
    text = reproduce_data.toy_headline("acc")
    assert "1024 committed test prompts" in text and "tau 3.50 ± 0.10 over all" in text
    assert "3.25 ± 0.80 over the 42 outputs" in text
    assert "2.40 ± 0.06 for rounds starting in the first 64" in text and "4.75 ± 0.20 after" in text


def test_the_committed_report_gives_the_loop_aware_headline():
    md = (REPORT / "report.md").read_text()
    assert f"The loop-aware headline: {reproduce_data.toy_headline()}." in md


def test_the_committed_report_and_the_readme_headline_are_what_reproduce_prints(tmp_path):
    """`python -m workbench reproduce` now (4 s): every row's value, verdict and command as
    committed in experiments/reproduce/report.json, and the README's headline count of the
    rows that hold as the fresh report's."""
    assert reproduce.main(["--out", str(tmp_path)]) == 0
    fresh = json.loads((tmp_path / "report.json").read_text())["rows"]
    committed = json.loads((REPORT / "report.json").read_text())["rows"]
    keys = ("name", "value", "holds", "data", "command")
    assert [{k: r[k] for k in keys} for r in committed] == [{k: r[k] for k in keys}
                                                            for r in fresh]
    held = sum(r["holds"] is True for r in fresh)
    assert f"Holds: {held} of {len(fresh)} rows" in (tmp_path / "report.md").read_text()
    readme = (reproduce_entry.ROOT / "README.md").read_text()
    assert f"| paper claims on the workbench | {held} of {len(fresh)} hold;" in readme
