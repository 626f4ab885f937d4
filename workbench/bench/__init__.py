"""The reference engine's benchmark drivers (they run on the GPU machine: torch, triton and
transformers, never hydra or simpy).

    python -m workbench.bench --out F          # AR vs DFlash decode speed (decode.py)
    python -m workbench.bench --ablate         # bs-1 AR under each kernel switch (ablate.py)
    python -m workbench.bench.phases --out F   # each phase of a round replayed alone

`report.py` derives and prints what the decode bench measured. This module imports nothing.
"""
