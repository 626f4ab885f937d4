"""`python -m workbench <command> [args]`: the workbench's command line.

Each command lives in its own module and is imported only when it is run, so `simulate`
never imports torch and the GPU commands never import simpy or hydra.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "simulate": ("workbench.simulate", "simulate a serving engine (Hydra app; the main job)"),
    "decode": ("workbench.decode", "decode prompts with the reference engine (AR or DFlash)"),
    "kernels-check": ("kernels.check", "check every Triton kernel against its oracle"),
    "serve-bench": ("workbench.serve_bench", "serving loop: sync vs overlap, concurrency sweep"),
    "calibrate": ("workbench.calibrate", "time the engine's pieces on the GPU -> cost tables"),
    "validate": ("workbench.validate", "engine runs (GPU) vs simulator predictions (report)"),
    "reproduce": ("workbench.reproduce", "paper tables and figures vs the workbench (report)"),
}


def _usage() -> str:
    rows = "\n".join(f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: python -m workbench <command> [args]\n\ncommands:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    sys.argv = [f"python -m workbench {name}", *rest]
    return int(module.main() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
