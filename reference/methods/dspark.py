"""DSpark: DFlash's backbone with a Markov head, confidence head and per-request verify
lengths (reference/methods/dspark_proposer.py). Options: `path` (a DSpark folder),
`temperature` of the draft (0: argmax), `policy` of the verify-length scheduler (`full`
or `static`; the load-aware policies need an SPS table and are built by the toy study),
`threshold` (static policy), `seed`; `records`, a list each round appends its confidences,
verify lengths and accepted lengths to (programmatic: the toy study's calibration)."""

from __future__ import annotations

from common.dspark_schedule import Scheduler
from reference.methods.dspark_proposer import load_dspark
from reference.registry import register


@register("dspark")
def dspark(target, context, path, temperature=0.0, policy="full", threshold=0.5, seed=0,
           records=None):
    return load_dspark(path, target, scheduler=Scheduler(policy, threshold=threshold),
                       temperature=temperature, seed=seed, records=records)
