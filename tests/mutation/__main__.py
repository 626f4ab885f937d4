"""Command line of the mutation runner (see tests/mutation/runner.py for the catalog format).

    python -m tests.mutation [--list] [--only NAME ...] [--rev REV] [--gpu]
                             [--timeout S] [--no-baseline] [--out DIR]

Without --gpu it runs the CPU mutations (gpu_only ones are reported as skipped); with --gpu,
on a CUDA machine, only the gpu_only ones (under HYPOTHESIS_PROFILE=gpu). --rev measures the
catalog against a committed tree (e.g. the suite before a change) instead of the working
tree. The shared CPU suits `nice -n 10`. The whole CPU catalog takes about 30-40 minutes on
two cores.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tests.mutation import runner


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.mutation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--list", action="store_true", help="print the catalog and exit")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this mutation (repeatable)",
    )
    ap.add_argument("--rev", help="test the tree of this git revision (default: working tree)")
    ap.add_argument("--gpu", action="store_true", help="run the gpu_only mutations")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutation")
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the check that the unmutated tree passes the tests",
    )
    ap.add_argument("--out", type=Path, help="write results.json and results.md here")
    args = ap.parse_args(argv)
    mutations = runner.load()
    if args.only:
        unknown = set(args.only) - {m.name for m in mutations}
        if unknown:
            ap.error(f"--only: no mutation named {sorted(unknown)}")
        mutations = [m for m in mutations if m.name in args.only]
    if args.list:
        for m in mutations:
            flag = " [gpu]" if m.gpu_only else ""
            print(f"{m.name}{flag}  {m.file}\n    {m.why}\n    tests: {' '.join(m.tests)}")
        return 0
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            ap.error("--gpu needs a CUDA device")
    profile = "gpu" if args.gpu else "ci"
    outcomes = runner.run(
        mutations,
        rev=args.rev,
        timeout_s=args.timeout,
        profile=profile,
        gpu=args.gpu,
        baseline=not args.no_baseline,
    )
    s = runner.summary(outcomes)
    rate = "n/a" if s["kill_rate"] is None else f"{100 * s['kill_rate']:.1f}%"
    print(f"killed {s['killed']} of {s['ran']} ({rate}); survived: {s['survived']}")
    if args.out:  # the command as run, its output folder written OUT
        given = list(argv if argv is not None else sys.argv[1:])
        command = "python -m tests.mutation " + shlex.join(
            ["OUT" if a == str(args.out) else a for a in given]
        )
        runner.write_report(
            outcomes, args.out, {"command": command, "rev": args.rev, "profile": profile}
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
