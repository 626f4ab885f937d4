"""`python -m experiments.published [--out DIR]`: the simulator against published results.

Fits each engine family's kernel factors on the published no-speculation throughput
(experiments/published/fit.py), predicts every speculative cell from its tau
(DFlash, EAGLE-3, SGLang Spec V1 vs V2, vLLM), and writes predictions.json, fit.json,
report.md and predicted_vs_published.png (default: experiments/published/). About 10
minutes on one CPU core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.published.cells import HERE, load
from experiments.published.fit import fit
from experiments.published.report import predictions, write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    pub = load()
    fits = fit(pub)
    rows = predictions(pub, fits)
    command = "python -m experiments.published"
    s = write(args.out, pub, fits, rows, command)
    print(
        f"{s['cells']} predicted cells: median |error| {100 * s['median_abs_error']:.1f}%, "
        f"worst {100 * s['worst_abs_error']:.1f}%; Spec V2 gain at c = 32 "
        f"{100 * s['spec_v2_gain_c32']['predicted']:+.1f}% (published "
        f"{100 * s['spec_v2_gain_c32']['published']:+.1f}%); {args.out}"
    )


if __name__ == "__main__":
    main()
