"""The cost model a configuration names (`engine.cost_model`): the roofline of
simulator/costs.py, the tables measured on the GPU (simulator/calibrated.py), or `auto`, the
tables where conf/calibration/<hardware>/<model>.json prices the method and the roofline
elsewhere (simulator/engine_profiles.py `cost_model_name`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from simulator.calibrated import CalibratedCostModel
from simulator.costs import CostModel, RooflineCostModel
from simulator.engine_profiles import auto_table, cost_model_name
from simulator.params import SimConfig

COST_MODELS: dict[str, Callable[[SimConfig], CostModel]] = {
    "roofline": RooflineCostModel,
    "calibrated": CalibratedCostModel,
}


def make_cost_model(cfg: SimConfig) -> CostModel:
    """The cost model named by `engine.cost_model` (`auto` resolved)."""
    name = cost_model_name(cfg)
    if cfg.engine.cost_model == "auto" and name == "calibrated":
        cfg = dataclasses.replace(cfg, engine=dataclasses.replace(
            cfg.engine, calibration=auto_table(cfg)))
    return COST_MODELS[name](cfg)
