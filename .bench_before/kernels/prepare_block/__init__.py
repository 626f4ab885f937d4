"""`prepare_block`: Triton kernel (kernel.py), PyTorch oracle (ref.py), benchmark (bench.py)."""
