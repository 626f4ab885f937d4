"""`python -m workbench.bench [args]`: the engine's decode bench (workbench/bench/decode.py)."""

from workbench.bench.decode import main

main()
