"""`kv_materialize`: Triton kernel (kernel.py), PyTorch oracle (ref.py), benchmark (bench.py)."""
