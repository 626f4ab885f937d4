"""Byte-level BPE tokenizer of the toy world (the `tokenizers` library).

Two reserved tokens: `<|endoftext|>` (id 0, separates files) and `<|mask|>` (id 1, the
DFlash MASK; it never occurs in the data, so its embedding row stays near initialisation,
as Qwen3's unused row 151669 does).
"""

from __future__ import annotations

from pathlib import Path

EOT, MASK = "<|endoftext|>", "<|mask|>"


def train_tokenizer(texts: list[str], vocab_size: int = 4096):
    """Train a byte-level BPE on `texts`; returns a `tokenizers.Tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT, MASK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: str | Path):
    """Load a `tokenizer.json` written by `train_tokenizer(...).save(path)`."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def encode_corpus(tok, texts: list[str]) -> list[int]:
    """All texts as one token stream, each file followed by `<|endoftext|>`."""
    eot = tok.token_to_id(EOT)
    stream: list[int] = []
    for enc in tok.encode_batch(texts):
        stream.extend(enc.ids)
        stream.append(eot)
    return stream
