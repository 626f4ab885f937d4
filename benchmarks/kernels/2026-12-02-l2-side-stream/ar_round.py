"""Profile: the CUDA kernels of batch-1 AR decoding through `generate` with lookahead.

    PYTHONPATH=. python benchmarks/kernels/2026-12-02-l2-side-stream/ar_round.py

Qwen3-8B-shaped random bf16 weights, prompt 512, 128 new tokens. Prints the tokens/s of two
lookahead runs, then the kernels of a third (torch profiler) by count, so the launches a
token makes outside the decode graph can be read off: what separates the graph's replay
time from the per-token time of `generate`.
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from reference.generate import generate
from reference.loaders import preset_config, random_state_dict, random_target

NEW = 128


def main() -> None:
    cfg = preset_config("qwen3-8b")
    prompt = torch.randint(0, cfg.vocab_size, (512,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    state = random_state_dict(cfg, device="cuda", dtype=torch.bfloat16)
    target = random_target("qwen3-8b", device="cuda", dtype=torch.bfloat16, state=state)
    target.enable_compile()
    for _ in range(3):
        out = generate(target, [prompt], max_new_tokens=NEW, lookahead=True)
        s = out.stats
        print(f"lookahead: {s['tokens_per_s']:.1f} tok/s, "
              f"{1e3 * s['decode_s'] / max(s['rounds'], 1):.3f} ms a round")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        generate(target, [prompt], max_new_tokens=NEW, lookahead=True)
    print(prof.key_averages().table(sort_by="count", row_limit=40, max_name_column_width=70))


if __name__ == "__main__":
    main()
