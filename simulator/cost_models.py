"""The cost model a configuration names (`engine.cost_model`): the roofline of
simulator/costs.py, or the tables measured on the GPU (simulator/calibrated.py)."""

from __future__ import annotations

from collections.abc import Callable

from simulator.calibrated import CalibratedCostModel
from simulator.costs import CostModel, RooflineCostModel
from simulator.params import SimConfig

COST_MODELS: dict[str, Callable[[SimConfig], CostModel]] = {
    "roofline": RooflineCostModel,
    "calibrated": CalibratedCostModel,
}


def make_cost_model(cfg: SimConfig) -> CostModel:
    """The cost model named by `engine.cost_model`."""
    return COST_MODELS[cfg.engine.cost_model](cfg)
