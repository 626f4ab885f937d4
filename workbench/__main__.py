"""`workbench <command> [args]` (or `python -m workbench ...`): the workbench's command line.

Each command lives in its own module and is imported only when it is run, so `simulate`
never imports torch and the GPU commands never import simpy or hydra; `--help` imports
nothing beyond this module. A command's bad input ends as one line (workbench/errors.py),
Ctrl-C as one line, and output into a closed pipe (`--help | head`) quietly.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from workbench.errors import run_main

COMMANDS = {
    "simulate": ("workbench.simulate", "simulate a serving engine (Hydra app; the main job)"),
    "decode": ("workbench.decode.cli", "decode text or token-id prompts with the reference engine"),
    "kernels-check": ("kernels.check", "check every Triton kernel against its oracle"),
    "serve-bench": ("workbench.serve.bench", "serving loop: sync vs overlap, concurrency sweep"),
    "calibrate": ("workbench.calibrate.cli", "time the engine's pieces on the GPU -> cost tables"),
    "calibrate-engine": ("workbench.calibrate.engine",
                         "an engine profile fitted on sglang/vLLM benchmark output"),
    "validate": ("workbench.validate.cli", "engine runs (GPU) vs simulator predictions (report)"),
    "report": ("workbench.report", "a multirun folder -> one CSV, table, plot (search: best)"),
    "reproduce": ("workbench.reproduce.cli", "paper tables and figures vs the workbench (report)"),
}


ENGINE = ("torch", "triton", "transformers", "safetensors", "tokenizers")  # the engine extra


def _prog() -> str:
    """How the user called us: the console script or `python -m workbench`."""
    return "python -m workbench" if Path(sys.argv[0]).name == "__main__.py" else "workbench"


def _usage() -> str:
    rows = "\n".join(f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items())
    return (f"usage: {_prog()} <command> [args]   ({_prog()} --version: the version)\n\n"
            f"commands:\n{rows}\n")


def version() -> str:
    """The installed distribution's version (the checkout's pyproject.toml when not installed)."""
    from common.stamps import DIST, version

    return version(DIST) or "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        return run_main(_prog(), lambda: print(_usage()))
    if argv[0] in ("-V", "--version"):
        return run_main(_prog(), lambda: print(f"dflash-workbench {version()}"))
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}: one of {', '.join(COMMANDS)} (see --help)",
              file=sys.stderr)
        return 2
    sys.argv = [f"{_prog()} {name}", *rest]
    try:
        return run_main(name, importlib.import_module(COMMANDS[name][0]).main)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ENGINE:
            raise
        print(
            f"{name} needs {e.name}: pip install 'dflash-workbench[engine]' (the README "
            "says how to get the CPU-only torch)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
