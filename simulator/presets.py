"""Published acceptance lengths (tau = mean commit length per round, bonus included).

Keyed by (method, model, dataset, temperature) -> (tau, block size it was measured at); the
method is a class's `preset` key (simulator/methods/), which a method without a published
value leaves None.
Sources, all from docs/dflash.md section 4:

- DFlash, Qwen3-8B/4B, T = 0: paper Table 3 (SGLang, B200) for Math500 and HumanEval
  (Qwen3-8B 8.01 / 6.50, Qwen3-4B 8.01 / 6.63); Table 1 (Transformers, H200) for GSM8K and
  MT-Bench. T = 1: Table 1.
- DFlash, LLaMA-3.1-8B (B = 10): Table 5 (GSM8K 4.32, HumanEval 4.91). Math500 and MT-Bench
  were not published: GSM8K's and Alpaca's (3.73) values stand in [INF].
- eagle (EAGLE-3-style chain of 7 draft steps, B = 8): Table 1's EAGLE-3 (16) column for
  Qwen3 and Table 5's EAGLE-3 (10) for LLaMA (its MT-Bench and Math500 from Alpaca and GSM8K
  [INF]). EAGLE-3 there drafts a small tree, so a chain of the same depth is optimistic.
- toy (the ~8M-parameter Qwen3-shaped target): no published values. 4.0 for DFlash and 2.5
  for the chain are guesses [INF] in the 3-5 range docs/dflash.md section 6.5 expects at tiny
  scale.

- DSpark (gamma = 7 drafts, B = 8), T = 1: the DSpark paper's Table 1 (chain drafting,
  scheduler off; docs/methods.md 1.7), MATH standing for Math500.
  No T = 0 values were published: T = 1's stand in [INF].

Models without an entry fall back to Qwen3-8B's values; temperatures without one to T = 0's,
then T = 1's.
"""

from __future__ import annotations

_DFLASH_Q3_8B = {"gsm8k": 6.54, "math500": 8.01, "humaneval": 6.50, "mtbench": 4.24}
_DFLASH_Q3_4B = {"gsm8k": 6.53, "math500": 8.01, "humaneval": 6.63, "mtbench": 4.35}
_DFLASH_Q3_8B_T1 = {"gsm8k": 5.98, "math500": 6.40, "humaneval": 5.52, "mtbench": 3.80}
_DFLASH_Q3_4B_T1 = {"gsm8k": 6.00, "math500": 6.67, "humaneval": 6.04, "mtbench": 4.07}
_DFLASH_LLAMA = {"gsm8k": 4.32, "math500": 4.32, "humaneval": 4.91, "mtbench": 3.73}
_CHAIN_Q3_8B = {"gsm8k": 3.23, "math500": 3.02, "humaneval": 3.17, "mtbench": 2.83}
_CHAIN_Q3_4B = {"gsm8k": 3.30, "math500": 3.08, "humaneval": 3.05, "mtbench": 3.02}
_CHAIN_Q3_8B_T1 = {"gsm8k": 3.12, "math500": 2.91, "humaneval": 3.05, "mtbench": 2.70}
_CHAIN_Q3_4B_T1 = {"gsm8k": 3.22, "math500": 2.99, "humaneval": 3.01, "mtbench": 2.95}
_CHAIN_LLAMA = {"gsm8k": 3.49, "math500": 3.49, "humaneval": 3.62, "mtbench": 3.11}
_DSPARK_Q3_8B_T1 = {"gsm8k": 6.17, "math500": 5.78, "humaneval": 5.52, "mtbench": 3.72}
_DSPARK_Q3_4B_T1 = {"gsm8k": 6.11, "math500": 5.70, "humaneval": 5.38, "mtbench": 3.64}
_TOY = {"gsm8k": 4.0, "math500": 4.0, "humaneval": 4.0, "mtbench": 4.0}
_TOY_CHAIN = {"gsm8k": 2.5, "math500": 2.5, "humaneval": 2.5, "mtbench": 2.5}

# (method, model, temperature) -> (block size measured at, {dataset: tau})
TAU: dict[tuple[str, str, float], tuple[int, dict[str, float]]] = {
    ("dflash", "qwen3-8b", 0.0): (16, _DFLASH_Q3_8B),
    ("dflash", "qwen3-4b", 0.0): (16, _DFLASH_Q3_4B),
    ("dflash", "qwen3-8b", 1.0): (16, _DFLASH_Q3_8B_T1),
    ("dflash", "qwen3-4b", 1.0): (16, _DFLASH_Q3_4B_T1),
    ("dflash", "llama-3.1-8b", 0.0): (10, _DFLASH_LLAMA),
    ("dflash", "toy", 0.0): (16, _TOY),
    ("eagle", "qwen3-8b", 0.0): (8, _CHAIN_Q3_8B),
    ("eagle", "qwen3-4b", 0.0): (8, _CHAIN_Q3_4B),
    ("eagle", "qwen3-8b", 1.0): (8, _CHAIN_Q3_8B_T1),
    ("eagle", "qwen3-4b", 1.0): (8, _CHAIN_Q3_4B_T1),
    ("eagle", "llama-3.1-8b", 0.0): (8, _CHAIN_LLAMA),
    ("eagle", "toy", 0.0): (8, _TOY_CHAIN),
    ("dspark", "qwen3-8b", 1.0): (8, _DSPARK_Q3_8B_T1),
    ("dspark", "qwen3-4b", 1.0): (8, _DSPARK_Q3_4B_T1),
}


def published_tau(method: str, model: str, dataset: str, temperature: float) -> tuple[float, int]:
    """(tau, block size it was measured at) for this method, model, dataset and temperature."""
    key = (method, model, float(temperature))
    if key not in TAU:
        key = (method, "qwen3-8b", float(temperature))
    for t in (0.0, 1.0):
        if key not in TAU:
            key = (method, "qwen3-8b", t)
    block, table = TAU[key]
    return table[dataset], block
