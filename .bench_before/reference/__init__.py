"""PyTorch reference engine: Qwen3 target on a paged KV pool, proposers, verify, generate."""
