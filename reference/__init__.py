"""PyTorch reference engine: a Qwen3 target on a paged KV pool, the methods registry, verify,
and the one host loop (`generate` wraps the serving loop).

    from reference import load_target, load_dflash, generate
    target = load_target("experiments/zoo/target")
    out = generate(target, [[1, 2, 3]], proposer=load_dflash("experiments/zoo/dflash-b16",
                                                             target))

Any registered method: `build(MethodSpec.parse("isd:stride=4"), target)`.
"""

from reference.generate import GenerateOutput, generate
from reference.loaders import load_target
from reference.methods import BuildContext, MethodSpec, build
from reference.methods.dflash import load_dflash

__all__ = ["BuildContext", "GenerateOutput", "MethodSpec", "build", "generate", "load_dflash",
           "load_target"]
