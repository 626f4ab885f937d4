"""`paged_attention`: Triton kernel (kernel.py), PyTorch oracle (ref.py), benchmark (bench.py)."""
