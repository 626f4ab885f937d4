"""Triton kernels of the DFlash hot path, each next to its pure-PyTorch oracle."""
