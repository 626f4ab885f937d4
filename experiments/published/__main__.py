"""`python -m experiments.published [--out DIR]`: the simulator against published results.

Fits each engine family's kernel factors on the published no-speculation throughput
(experiments/published/fit.py), fits the speculative path's two terms per engine release on
the declared anchor cells and predicts every other speculative cell from its tau under four
schemes (experiments/published/protocol.py: anchored, leave-one-table-out, leave-one-
concurrency-out, baseline-only), and writes predictions.json, fit.json, protocol.json,
report.md and predicted_vs_published.png (default: experiments/published/). About 10
minutes on one CPU core; `--fits F` takes the baseline fits from a fit.json written before
(the fit is deterministic; the protocol alone takes about a minute).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.published.cells import HERE, load
from experiments.published.fit import fit
from experiments.published.protocol import schemes
from experiments.published.report import predictions, write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--fits", type=Path, default=None, help="fit.json to reuse")
    args = ap.parse_args()
    pub = load()
    fits = json.loads(args.fits.read_text())["fits"] if args.fits else fit(pub)
    runs = schemes(pub, fits)
    rows = predictions(pub, fits, runs)
    command = "python -m experiments.published"
    scores = write(args.out, pub, fits, rows, command, runs)
    for name, s in scores.items():
        a, g = s["all"], s["spec_v2_gain"]["32"]
        print(
            f"{name}: {a['cells']} held-out cells, median |error| "
            f"{100 * a['median_abs_error']:.1f}%, worst {100 * a['worst_abs_error']:.1f}%, "
            f"bias {100 * a['bias']:+.1f}%; Spec V2 gain at c = 32 "
            f"{100 * g['predicted']:+.1f}% (published {100 * g['published']:+.1f}%)"
        )
    print(args.out)


if __name__ == "__main__":
    main()
