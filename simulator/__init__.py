"""Discrete-event (simpy) serving simulator for speculative decoding. Never imports torch.

`simulator.run(cfg) -> SimResult` simulates one configuration (`SimConfig`, a dict or a
Hydra DictConfig); `python -m workbench simulate` is the command line around it and
`python -m simulator.bench` measures its speed. The exports load lazily, so the numpy-only
modules (`simulator.calibration`, `simulator.params`) import where simpy is absent (the GPU
machine fits its calibration tables with them).
"""

from __future__ import annotations

import importlib

_EXPORTS = {"run": "simulator.cluster", "SimResult": "simulator.metrics",
            "ConfigError": "simulator.params", "SimConfig": "simulator.params"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
