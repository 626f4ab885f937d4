"""`qk_norm_rope_write`: Triton kernel (kernel.py), oracle (ref.py), benchmark (bench.py)."""
