"""The toy world: a small code model trained here from scratch, and drafters trained on it.

corpus.py (stdlib .py files, split by file), tokenizer.py (byte-level BPE), train_target.py
(Qwen3 target in `micro`, `small` and `base` sizes, saved with save_pretrained).
"""
