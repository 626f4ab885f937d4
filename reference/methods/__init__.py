"""Every drafting/verification method of the reference engine, built through one factory.

Each module of this package registers its method(s) with `reference.registry.register`;
importing the package imports them all (a new method is one new module here). `build` is the
only way drivers (decode, serve-bench, workbench.bench, calibrate, validate, the acceptance
experiments, the toy studies) make a proposer:

    proposer = build(MethodSpec.parse("dflash:path=experiments/zoo/dflash-b16"), target)
    proposer = build("oracle:tau=6.5,block_size=16", target, BuildContext(prompts, 256))
"""

from __future__ import annotations

import importlib
import pkgutil

from reference.model import Target
from reference.proposers import Proposer
from reference.registry import FACTORIES, BuildContext, MethodSpec

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def names() -> list[str]:
    """Registered method names, sorted."""
    return sorted(FACTORIES)


def build(spec: MethodSpec | str, target: Target,
          context: BuildContext | None = None) -> Proposer | None:
    """The proposer of `spec` for `target` (None for plain decoding).

    Raises ValueError naming the method and the registered ones when the name is unknown,
    and the factory's own ValueError/TypeError (with the method named) for bad options.
    On a tensor-parallel shard (target.tp) the proposer's drafter is placed as
    reference/parallel.py's `shard_method` says.
    """
    spec = MethodSpec.parse(spec) if isinstance(spec, str) else spec
    if spec.name not in FACTORIES:
        raise ValueError(f"unknown method {spec.name!r}; registered: {', '.join(names())}")
    try:
        proposer = FACTORIES[spec.name](target, context or BuildContext(), **spec.kwargs)
    except TypeError as e:
        raise TypeError(f"method {spec.name!r}: {e}") from e
    if target.tp is None:
        return proposer
    from reference.parallel import shard_method

    return shard_method(proposer, target.tp)


__all__ = ["BuildContext", "MethodSpec", "build", "names"]
