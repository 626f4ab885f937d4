"""Discrete-event (simpy) serving simulator for speculative decoding. Never imports torch.

`simulator.run(cfg) -> SimResult` simulates one configuration (`SimConfig`, a dict or a
Hydra DictConfig); `python -m workbench simulate` is the command line around it and
`python -m simulator.bench` measures its speed.
"""

from simulator.cluster import run
from simulator.metrics import SimResult
from simulator.params import ConfigError, SimConfig

__all__ = ["ConfigError", "SimConfig", "SimResult", "run"]
