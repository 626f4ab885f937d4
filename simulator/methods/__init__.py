"""The simulator's speculative methods, one module each, registered by name in `METHODS`.

Importing the package imports every module in this folder (in name order, after base.py's
`none`), and each registers its `SpecMethod` subclass with `@register`, so a new method is
one module here plus its conf/spec/<name>.yaml: params, shapes, costs, acceptance and the
replica ask the class (simulator/methods/base.py lists what it declares), never its name.
A method's own options are a frozen dataclass in its module (`spec.options`); its names are
those of the common table (common/methods.py), the reference's too. A variant module
(`dflash_tree`, `eagle_tree`: the trees of `dflash` and `eagle`) registers nothing and is
built by its method's module. Modules import `base` (a method also its variant), never this
package or another method, so registration has no cycles.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from simulator.methods.base import METHODS, NoSpec, SpecMethod, register

if TYPE_CHECKING:
    from simulator.params import SimConfig

__all__ = ["METHODS", "NoSpec", "SpecMethod", "make_method", "register"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")


def make_method(cfg: SimConfig) -> SpecMethod:
    """The method named by `cfg.spec.method`, built from its config."""
    return METHODS[cfg.spec.method].from_config(cfg)
