"""`fused_moe`: Triton kernels (kernel.py), PyTorch oracle (ref.py), benchmark (bench.py)."""
