"""`python -m workbench.bench [args]`: the engine's decode bench (workbench/bench/decode.py)."""

from workbench.bench.decode import main
from workbench.errors import run_main

raise SystemExit(run_main("workbench.bench", lambda: main() and 0))  # main returns a dict
