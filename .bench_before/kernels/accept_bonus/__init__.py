"""`accept_bonus`: Triton kernel (kernel.py), PyTorch oracle (ref.py), benchmark (bench.py)."""
