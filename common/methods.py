"""The one table of method names, shared by the reference engine and the simulator.

A drafting/verification method has one name in both layers: the reference's method spec
(`reference.methods.build("dflash:path=...")`) and the simulator's `spec.method` name the
same method the same way, and a method's variants are options of it in both (DFlash's tree
is `dflash:tree_budget=N` in the reference, `spec.method=dflash spec.options.tree_budget=N`
in the simulator). `NAMES` lists every name with the layers that register it; a test checks
it against both registries (`reference.methods.names()`, `simulator.methods.METHODS`), and
the simulator's `register` refuses a name missing here. `colour` is the method's colour in
every figure (matplotlib tab10; the baseline `none` is grey).

`TIERS` is LinearSpec's batch-size tier table of block sizes, which both layers use.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodName:
    """One method: its name, what it is, its colour and the layers that register it."""

    name: str
    summary: str
    colour: str
    reference: bool = True  # registered in reference.methods
    simulator: bool = True  # registered in simulator.methods


BASELINE = "none"  # plain autoregressive decoding, the baseline of every comparison

NAMES: dict[str, MethodName] = {m.name: m for m in (
    MethodName("none", "plain autoregressive decoding", "tab:gray"),
    MethodName("dflash", "DFlash block drafter, chain or tree (tree_budget)", "tab:blue"),
    MethodName("dspark", "DSpark: DFlash backbone, Markov head, verify-length scheduler",
               "tab:green"),
    MethodName("eagle", "EAGLE-style autoregressive drafter, chain or tree (tree_tokens)",
               "tab:orange"),
    MethodName("isd", "I-DLM introspective strided decoding (self-speculation)", "tab:red"),
    MethodName("linearspec", "Nemotron LinearSpec (self-speculation, tiered B)", "tab:purple"),
    MethodName("prompt_lookup", "prompt lookup (n-gram) drafting, no drafter", "tab:brown"),
    MethodName("oracle", "drafts the target's own tokens at a chosen acceptance", "tab:pink",
               simulator=False),
    MethodName("dflash_ar", "DFlash ablation: causal block, sequential drafts (DFlash-AR)",
               "tab:olive", simulator=False),
    MethodName("fusion", "DFlash ablation: input fusion instead of KV injection",
               "tab:cyan", simulator=False),
    MethodName("no_features", "DFlash ablation: target embeddings instead of features",
               "black", simulator=False),
)}

TIERS = ((4, 16), (32, 8), (1 << 30, 4))  # LinearSpec (max_running_bs, B), ascending
