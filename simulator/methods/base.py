"""`SpecMethod`, the one seam of the simulator's speculative methods, and its registry.

A method class declares its own facts and the rest of the simulator asks it, never its name:

- `options_class`: its own options (`spec.options`), a frozen `MethodOptions` dataclass
  validated on construction; `options(spec)` builds them (unknown keys are errors);
- `validate(spec)`: its config rules (simulator/params.py calls it; `ConfigError`);
- `draft_layers(spec)`, `fusion_params(spec, hidden)`: its drafter's target-shaped layers
  (weights and draft-KV pool, simulator/shapes.py) and input projection, 0 when it has none;
- `preset` / `published_tau`: its row family in simulator/presets.py's published tau table,
  which `spec.acceptance = preset` solves a curve from (simulator/acceptance.py);
- `calibration` / `check_calibration`: the reference engine's timing-table rows its rounds
  are priced from, None when no table covers it (simulator/calibrated.py);
- `takes_verify_schedule`: whether `spec.verify_schedule` (drafts by batch size) applies;
- `label(spec)`: its run's name in tables and plots (its colour is in the common table of
  method names, common/methods.py); `search_space()`: the dimensions a configuration
  search adds for it (workbench/search/space.py);
- `from_config(cfg)`: the instance that prices and commits its rounds.

An instance answers, for a decode batch, the verify length of each request (`verify_lens`:
B for every request here), the GPU time of the whole round (`decode_gpu_s`: draft + verify
+ LM heads + method extras, priced by a `CostModel`), the host time the method adds to a
round's planning (`host_plan_s`), the extra GPU time of a prefill, and the commit lengths
(`commit_lens`, from the acceptance model by default).

`register` puts a class into `METHODS` under its `name`; the package's `__init__` imports
every module of simulator/methods/, so a new method is one module there (plus its
conf/spec/<name>.yaml). This module imports no other simulator module at run time but
errors, fields and presets, so simulator/params.py can take its `spec.method` choices from
`METHODS`. `none` (plain decoding) is registered here, first, as the baseline of every run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from common.batch_schedule import Schedule, drafts_for, parse_schedule
from common.methods import NAMES
from simulator import presets
from simulator.errors import ConfigError
from simulator.fields import check_field

if TYPE_CHECKING:
    from simulator.acceptance import AcceptanceModel
    from simulator.costs import CostModel
    from simulator.params import SimConfig, SpecParams

METHODS: dict[str, type[SpecMethod]] = {}
M = TypeVar("M", bound="type[SpecMethod]")
Opts = TypeVar("Opts", bound="MethodOptions")
BLOCK_SIZES = (4, 8, 16)  # B a configuration search tries for every method that drafts


@dataclass(frozen=True)
class MethodOptions:
    """A method's own options (`spec.options`): each subclass is a frozen dataclass whose
    fields declare their range or choices with `simulator.fields.param`; construction checks
    them and raises a one-line `ConfigError` naming `spec.options.<field>` and the range
    (a field with a list default takes a list)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            key, value = f"spec.options.{f.name}", getattr(self, f.name)
            if f.default_factory is not dataclasses.MISSING and not isinstance(value, list):
                raise ConfigError(f"{key} = {value!r} must be a list")
            check_field(key, value, f.metadata)

    @classmethod
    def of(cls: type[Opts], data: Mapping[str, Any] | Opts, method: str) -> Opts:
        """The options of `method` from a mapping (unknown keys are errors), or `data`
        itself when it already is one."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise ConfigError(f"spec.options must be a mapping, got {data!r}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in data if k not in known]
        if unknown:
            raise ConfigError(f"spec.options.{unknown[0]} is not an option of spec.method = "
                              f"{method} (its options: {', '.join(known) or 'none'})")
        return cls(**{k: _plain(v) for k, v in data.items()})


def _plain(value: Any) -> Any:
    """A list for an OmegaConf ListConfig (or tuple), the value otherwise."""
    if isinstance(value, tuple) or type(value).__name__ == "ListConfig":
        return list(value)
    return value


def register(cls: M) -> M:
    """Class decorator: add `cls` to `METHODS` under `cls.name` (unique, and a name of the
    common table of method names, common/methods.py)."""
    if cls.name in METHODS:
        raise ValueError(f"simulator method {cls.name!r} is registered twice")
    if cls.name not in NAMES:
        raise ValueError(f"simulator method {cls.name!r} is not in common/methods.py NAMES")
    METHODS[cls.name] = cls
    return cls


class SpecMethod:
    """Base class: a round is one target forward of the verify lengths plus the LM head."""

    name: ClassVar[str] = ""
    preset: ClassVar[str | None] = None  # simulator/presets.py TAU key; None: no published tau
    calibration: ClassVar[str | None] = None  # calibration table rows; None: not measured
    takes_verify_schedule: ClassVar[bool] = False  # spec.verify_schedule sets its K per batch
    options_class: ClassVar[type[MethodOptions]] = MethodOptions  # none by default

    def __init__(self, block_size: int = 1):
        self.block_size = block_size

    @classmethod
    def options(cls, spec: SpecParams) -> MethodOptions:
        """This method's options of `spec` (`spec.options`), validated."""
        return cls.options_class.of(spec.options, cls.name)

    @classmethod
    def label(cls, spec: SpecParams) -> str:
        """The run's name in tables and plots: "<method> B=<B>"."""
        return f"{cls.name} B={spec.block_size}"

    @classmethod
    def search_space(cls) -> dict[str, tuple]:
        """Config keys a configuration search suggests for this method, with their values."""
        return {"spec.block_size": BLOCK_SIZES}

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        """Raise `ConfigError` (naming the key) if `spec` does not fit this method."""

    @classmethod
    def draft_layers(cls, spec: SpecParams) -> int:
        """Target-shaped drafter layers that hold weights and a draft KV pool (0: none)."""
        return 0

    @classmethod
    def fusion_params(cls, spec: SpecParams, hidden: int) -> int:
        """Parameters of the drafter's input projection from target features (0: none)."""
        return 0

    @classmethod
    def published_tau(cls, model: str, dataset: str, temperature: float) -> tuple[float, int]:
        """(tau, block size it was measured at) that `spec.acceptance = preset` solves from."""
        if cls.preset is None:
            raise ConfigError(f"spec.acceptance = preset: no published tau for spec.method = "
                              f"{cls.name}; use constant, replay or mean with spec.tau")
        return presets.published_tau(cls.preset, model, dataset, temperature)

    @classmethod
    def calibration_rows(cls, spec: SpecParams) -> str | None:
        """The calibration table's rows that price this method's rounds: plain decoding's
        when nothing is drafted (B = 1), else the method's own (None: not measured)."""
        return NoSpec.calibration if spec.block_size == 1 else cls.calibration

    @classmethod
    def check_calibration(cls, spec: SpecParams, doc: dict) -> None:
        """Refuse (`ConfigError`) a calibration document measured on other method shapes."""

    @classmethod
    def from_config(cls, cfg: SimConfig) -> SpecMethod:
        """The method of `cfg.spec`."""
        return cls(cfg.spec.block_size)

    @property
    def max_query(self) -> int:
        """Most KV slots one round writes per request past its committed prefix (its query
        tokens): the width the engine reserves `engine.kv_reserve_blocks` times ahead."""
        return self.block_size

    def verify_lens(self, n: int) -> np.ndarray:
        """Tokens verified per request this round (anchor included), (n,) int64."""
        return np.full(n, self.block_size, dtype=np.int64)

    def schedule(self, cost: CostModel, acceptance: AcceptanceModel, slots: np.ndarray,
                 kv: np.ndarray) -> np.ndarray:
        """Verify lengths of a stretch's rounds for these slots (kv: their committed KV);
        `verify_lens` unless the method schedules per request (DSpark)."""
        return self.verify_lens(len(slots))

    def plan_rounds(self, cost: CostModel, acceptance: AcceptanceModel, slots: np.ndarray,
                    kv: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """(q, commits) of the next `rounds` rounds: q is (n,) for all rounds, or (rounds, n)
        when the method schedules every round (DSpark with per-round confidences); commits
        (rounds, n) are cut by q."""
        q = self.schedule(cost, acceptance, slots, kv)
        return q, self.commit_lens(acceptance, slots, rounds, q)

    def commit_lens(self, acceptance: AcceptanceModel, slots: np.ndarray, rounds: int,
                    q: np.ndarray) -> np.ndarray:
        """Commit lengths (rounds, n) of the next `rounds` rounds of these slots."""
        return acceptance.sample(slots, rounds, q)

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        """GPU seconds of decode rounds; kv is (n,) or (rounds, n) committed KV lengths."""
        return cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())

    def host_plan_s(self, n: int) -> float:
        """Host seconds the method adds to planning a decode round of n requests."""
        return 0.0

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        """GPU time of a prefill (extend) of q new prompt tokens on top of kv cached ones;
        the LM head runs on each request's last position."""
        return float(cost.prefill_forward_s(q, kv) + cost.lm_head_s(len(q)))


@register
class NoSpec(SpecMethod):
    """Plain decoding: one target forward with q_len = 1 per request, then the LM head."""

    name = "none"
    calibration = "none"

    @classmethod
    def label(cls, spec: SpecParams) -> str:
        return cls.name

    @classmethod
    def search_space(cls) -> dict[str, tuple]:
        return {}  # B is 1

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        if spec.block_size != 1:
            raise ConfigError(f"spec.block_size = {spec.block_size} must be 1 when "
                              "spec.method = none")


class Drafted(SpecMethod):
    """A method with a drafter model of `spec.draft_layers` layers of the target's shape.

    With `spec.verify_schedule` (common/batch_schedule.py) a decode batch of n requests
    drafts K(n) tokens per request and verifies min(K(n) + 1, B) (vLLM's dynamic
    speculation); the method's `decode_gpu_s` prices the round from those lengths.
    """

    takes_verify_schedule = True

    def __init__(self, block_size: int = 1, verify_schedule: Schedule | None = None):
        super().__init__(block_size)
        self.verify_schedule = verify_schedule

    @classmethod
    def from_config(cls, cfg: SimConfig) -> SpecMethod:
        rows = cfg.spec.verify_schedule
        return cls(cfg.spec.block_size, parse_schedule(rows) if rows is not None else None)

    def verify_lens(self, n: int) -> np.ndarray:
        if self.verify_schedule is None or self.block_size == 1:
            return super().verify_lens(n)
        k = drafts_for(self.verify_schedule, n)
        return np.full(n, min(k + 1, self.block_size), dtype=np.int64)

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        if spec.block_size > 1 and spec.draft_layers < 1:
            raise ConfigError(f"spec.draft_layers = 0 is outside [1, 1024] for {cls.name}")

    @classmethod
    def draft_layers(cls, spec: SpecParams) -> int:
        return spec.draft_layers
