"""The simulate job's figures: titled with the setup (and the one sweep point a figure shows),
one colour per method in every panel, integer commit lengths, tau labelled pooled per round.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from workbench import plots
from workbench.config import SimulateConfig
from workbench.results import setup_title
from workbench.simulate import plan_runs, run_all

SETUP = ("qwen3-8b on h200, overlap engine (workbench), calibrated h200/qwen3-8b costs "
         "(conf/calibration/h200/qwen3-8b.json)")


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """{file name: figure} of a two-point job (c = 1, 4), DFlash B = 16 and none."""
    app = SimulateConfig()
    app.workload.num_requests, app.workload.output_tokens_mean = 16, 48
    app.sweep.concurrency, app.sweep.min_requests_per_client = [1, 4], 2
    runs = run_all(plan_runs(app)[1], progress=False)
    out, saved = tmp_path_factory.mktemp("plots"), {}

    def keep(fig, path):
        saved[path.name] = fig
        return path

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "_save", keep)
        plots.plot_runs(runs, out, "concurrency")
    yield runs, saved
    plt.close("all")


def test_every_figure_names_the_setup_and_a_one_point_figure_its_point(figures):
    _, saved = figures
    assert set(saved) == {"throughput.png", "latency.png", "commit_hist.png", "timeline.png"}
    for name, fig in saved.items():
        lines = fig._suptitle.get_text().splitlines()
        one_point = name in ("commit_hist.png", "timeline.png")
        assert lines == ([SETUP, "last sweep point (c = 4)"] if one_point else [SETUP]), name


def test_a_method_keeps_its_colour_in_every_panel(figures):
    _, saved = figures
    colours: dict[str, set] = {}
    for name in ("throughput.png", "latency.png", "timeline.png"):
        for ax in saved[name].axes:
            for line in ax.get_lines():
                label = line.get_label().removesuffix(" p50").removesuffix(" p99")
                colours.setdefault(label, set()).add(line.get_color())
    assert set(colours) == {"dflash B=16", "none"}
    assert all(len(c) == 1 for c in colours.values()), colours
    assert colours["dflash B=16"] != colours["none"]
    assert plots.method_colour("dflash B=8") == plots.method_colour("dflash B=16")


def test_commit_hist_bars_sit_on_integer_lengths_with_the_pooled_tau(figures):
    runs, saved = figures
    ax = saved["commit_hist.png"].axes[0]
    centres = sorted(p.get_x() + p.get_width() / 2 for p in ax.patches)
    assert centres == pytest.approx(list(range(1, 17)))
    assert all(float(t).is_integer() for t in ax.get_xticks())
    hist = np.asarray(runs[1][2].summary["speculation"]["commit_hist"], dtype=float)  # c = 4
    pooled = (hist * np.arange(len(hist))).sum() / hist.sum()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"dflash B=16, tau (pooled per round) {pooled:.2f}"]


def test_setup_title_names_profile_and_cost_source_when_present():
    summary = {
        "model": "qwen3-8b",
        "hardware": "h200",
        "replicas": 8,
        "engine_mode": "sync",
        "engine_profile": "sglang",
        "cost_model": "calibrated",
        "cost_source": "h200/qwen3-8b",
    }
    assert setup_title(summary) == (
        "qwen3-8b on h200 x 8, sync engine (sglang), calibrated costs (h200/qwen3-8b)"
    )
