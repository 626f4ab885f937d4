"""Hydra structured configs of the workbench: the schemas of every config group.

The simulator's parameter dataclasses (`simulator.params`) are the schemas of the groups
`model/`, `hardware/`, `spec/`, `engine/`, `workload/`; this module adds the app-level
sections (`sweep`, `output`) and registers everything in Hydra's ConfigStore as
`base_config` and `<group>/base_<group>`, which every YAML option lists first, so an unknown
key or a wrongly typed value fails at compose time. `load(cfg)` then checks every value
against its range or choices and fails, before anything runs, with a message that names the
key and the allowed range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from simulator.params import (
    ConfigError,
    EngineParams,
    HardwareParams,
    ModelParams,
    SimConfig,
    SpecParams,
    WorkloadParams,
    param,
    validate,
)

GROUPS = {
    "model": ModelParams,
    "hardware": HardwareParams,
    "spec": SpecParams,
    "engine": EngineParams,
    "workload": WorkloadParams,
}


@dataclass
class SweepParams:
    """Points simulated inside one job (a Hydra --multirun sweeps across jobs instead)."""

    concurrency: list[int] | None = param([1, 2, 4, 8, 16, 32, 64], 1, 1 << 24,
                                       doc="closed-loop workloads: one run per value")
    rate_rps: list[float] | None = param(None, 1e-9, 1e9, doc="open-loop: one run per value")
    baseline: bool = param(True, doc="also run spec.method=none at every point")
    min_requests_per_client: int = param(8, 0, 1 << 20, doc="closed loop: requests >= this * c")


@dataclass
class OutputParams:
    """What the simulate command writes and prints."""

    plots: bool = param(True)
    requests_csv: bool = param(True)
    progress: bool = param(True)


def main_job_engine() -> EngineParams:
    """The main job's engine: the workbench's own (conf/engine/workbench.yaml), priced by its
    calibration tables where they exist (`auto`)."""
    return EngineParams(profile="workbench", cost_model="auto")


@dataclass
class SimulateConfig(SimConfig):
    """The `python -m workbench simulate` app: a simulation config plus sweep and output."""

    engine: EngineParams = field(default_factory=main_job_engine)
    sweep: SweepParams = field(default_factory=SweepParams)
    output: OutputParams = field(default_factory=OutputParams)


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=SimulateConfig)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)


def load(cfg: DictConfig) -> SimulateConfig:
    """The composed config as a validated `SimulateConfig` (ConfigError names the key)."""
    obj = OmegaConf.to_object(cfg)
    if not isinstance(obj, SimulateConfig):
        raise ConfigError("the config was not composed from base_config")
    validate(obj)
    if obj.sweep.concurrency is not None and not obj.sweep.concurrency:
        raise ConfigError("sweep.concurrency must be null or a non-empty list")
    return obj



# Hydra launcher option -> what installs it
LAUNCHERS = {"joblib": "pip install 'dflash-workbench[sweep]'",
             "submitit_local": "pip install hydra-submitit-launcher",
             "submitit_slurm": "pip install hydra-submitit-launcher",
             "ray": "pip install hydra-ray-launcher", "ray_aws": "pip install hydra-ray-launcher",
             "rq": "pip install hydra-rq-launcher"}


def error_line(exc: BaseException) -> str:
    """One line for a Hydra or OmegaConf compose error (their messages span many lines):
    the message, a missing option's choices (schemas left out), the OmegaConf cause, and the
    install command of a launcher plugin that is not there."""
    head, options, section = [], [], ""
    for raw in str(exc).splitlines():
        line = raw.strip()
        if raw[:1].isspace():  # an entry of the section above, or OmegaConf's key details
            if section.startswith("Available options") and not line.startswith("base_"):
                options.append(line)
        elif line.startswith(("Available options", "Config search path")):
            section = line
        elif line:
            section = ""
            head.append(line)
    out = " ".join(head) + (f" (options: {', '.join(options)})" if options else "")
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause).strip():
        out += f": {str(cause).strip().splitlines()[0]}"
    launcher = re.search(r"Could not find 'hydra/launcher/([\w-]+)'", out)
    if launcher and launcher.group(1) in LAUNCHERS:
        name = launcher.group(1)
        out += f"; the {name} launcher is not installed: {LAUNCHERS[name]}"
    return out
