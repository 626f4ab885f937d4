"""Every method through the registry reproduces, token for token and round for round, the
outputs the engine gave before the methods seam existed.

`tests/data/method_pins.json` was written by the pre-registry engine (git commit cdfd308, CPU,
fp32) on the committed zoo pair: four prompts, 48 new tokens, the end-of-text stop token;
greedy for every method and T = 1 (seed 7) for DFlash B = 16. The ablation drafters are
the zoo's B = 16 drafter relabelled (fusion, DFlash-AR: same weights) or drafters with
random weights of seed 3 (no features, EAGLE), written here the same way.

The oracle's rounds are draws of its seeded corruption. They were re-pinned (tokens unchanged)
when those draws moved from every round to each request's start, at commit 04d1861; its
survival curve is checked by distribution in tests/reference/test_generate.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from reference.generate import generate
from reference.loaders import load_target
from reference.methods import BuildContext, MethodSpec, build
from reference.methods.variants import drafter_spec
from toy.draft_model import TrainableDrafter, drafter_config_dict

ZOO = Path(__file__).parents[2] / "experiments" / "zoo"
PINS = json.loads((Path(__file__).parents[1] / "data" / "method_pins.json").read_text())
MASK = 1  # the zoo tokenizer's <|mask|>


@pytest.fixture(scope="module")
def zoo_target():
    return load_target(ZOO / "target", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def variant_dirs(tmp_path_factory, zoo_target):
    root = tmp_path_factory.mktemp("variants")
    cfg = json.loads((ZOO / "dflash-b16" / "config.json").read_text())
    for variant in ("fusion", "ar"):
        shutil.copytree(ZOO / "dflash-b16", root / variant)
        cfg["dflash_config"]["variant"] = variant
        (root / variant / "config.json").write_text(json.dumps(cfg))
    for variant, layers, ids in (("no_features", 2, [0]), ("eagle", 1, [1, 2, 3])):
        raw = drafter_config_dict(zoo_target.config, num_layers=layers, block_size=8,
                                  mask_token_id=MASK, target_layer_ids=ids, variant=variant)
        TrainableDrafter(raw, zoo_target, seed=3).save(root / variant, dtype=torch.float32)
    return root


def _spec(case: str, variants: Path) -> tuple[MethodSpec, dict]:
    """The registry's spec of a pinned case, and generate's sampling arguments."""
    b16 = drafter_spec(ZOO / "dflash-b16")
    specs = {"none": MethodSpec.of("none"), "dflash-b16": b16,
             "dflash-b8": drafter_spec(ZOO / "dflash-b8"),
             "dflash-b16@8": b16.with_options(block_size=8), "dflash-b16-T1": b16,
             "oracle": MethodSpec.of("oracle", tau=3.0, block_size=8, seed=0),
             "isd": MethodSpec.of("isd", stride=4, mask_token_id=MASK),
             "linearspec": MethodSpec.of("linearspec", block_size=4, mask_token_id=MASK)}
    spec = specs.get(case) or drafter_spec(variants / case)
    return spec, ({"temperature": 1.0, "seed": 7} if case.endswith("-T1") else {})


@pytest.mark.parametrize("case", sorted(PINS["cases"]))
def test_method_reproduces_its_pinned_outputs(zoo_target, variant_dirs, case):
    spec, sampling = _spec(case, variant_dirs)
    prompts = PINS["prompts"]
    proposer = build(spec, zoo_target, BuildContext(prompts, PINS["max_new_tokens"]))
    out = generate(zoo_target, prompts, proposer=proposer,
                   max_new_tokens=PINS["max_new_tokens"],
                   stop_token_ids=tuple(PINS["stop_token_ids"]), **sampling)
    pinned = PINS["cases"][case]
    assert out.tokens == pinned["tokens"]
    assert out.accept_lengths == pinned["accept_lengths"]


def test_every_pinned_greedy_case_is_lossless():
    plain = PINS["cases"]["none"]["tokens"]
    for case, pinned in PINS["cases"].items():
        if not case.endswith("-T1"):
            assert pinned["tokens"] == plain, case
