"""The toy world: a small code model trained here from scratch, and drafters trained on it.

corpus.py (stdlib .py files, split by file), tokenizer.py (byte-level BPE), train_target.py
(Qwen3 target in `micro`, `small` and `base` sizes, saved with save_pretrained), gen_data.py
(the target's greedy continuations of training prompts), objective.py (anchors, labels,
decayed loss), draft_model.py (trainable drafter, training forward on the engine's code),
train_dflash.py (the trainer), variants.py and eagle.py (ablation drafters and the EAGLE-style
baseline, with their engine proposers), recipe.py and stages.py (the whole recipe in
resumable stages), ablations.py, zoo.py (manifest of committed models).
"""
