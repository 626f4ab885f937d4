"""The engine's attention launch shapes, three calls each, for `ncu` to profile (CUDA only).

    ncu --clock-control none --kernel-name regex:_paged_attention_kernel \
        --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats python benchmarks/kernels/2026-12-02-kv-prefetch/probe.py
"""

import torch

from kernels.paged_attention.sweep import launch

for shape in (("decode", 1, 1, 768), ("verify", 1, 16, 528), ("verify", 16, 16, 528),
              ("tree", 1, 64, 576)):
    call = launch(*shape)
    for _ in range(3):
        call()
torch.cuda.synchronize()
