"""`gemv`: Triton kernel (kernel.py, tuned by tune.py), oracle (ref.py), benchmark (bench.py)."""
