"""What-ifs users ask of the serving simulator, one module each, run as
`python -m experiments.whatifs.<name>`; each composes conf/experiment/whatif_<name>.yaml
(the setting it varies from), runs its sweep through `simulator.run` on the CPU in about a
minute, and writes results.json, <name>.png and README.md (the reading) into
experiments/whatif_<name>/:

- `context_decay`: acceptance decaying with context length (paper Table 4, the toy world),
  and the speedup from 1K to 32K tokens of prompt;
- `drafter_memory`: drafter weights and draft KV against the KV pool, and the concurrency
  where a deeper drafter stops paying;
- `losses`: speedup over (concurrency, tau, model), the region below 1 marked;
- `verify_schedule`: vLLM-style verify lengths by batch size against DSpark's load-aware
  budget, with the throughput cliff at a threshold;
- `tensor_parallel`: larger targets over 1-8 GPUs with an analytic all-reduce.

`toy_context` (torch, CPU) measures the toy world's acceptance by context bucket that
`context_decay` fits. Shared helpers live in `base`.
"""
