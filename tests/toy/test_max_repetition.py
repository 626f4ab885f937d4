"""The target's train filter (toy/train_target.py `drop_repetitive`, `--max-repetition`): per
file 4-gram repetition by the tokenizer's ids, files above R dropped, validation untouched.

Hand-built texts use a WordLevel tokenizer (one id per whitespace-separated word), so a
text's ids, and its repetition, are written down from the words: L distinct words repeated
k times hold N = kL ids and N - 3 4-grams, of which min(L, N - 3) are distinct (4-grams
L apart are equal, closer ones are not), so the rate is 1 - min(L, N - 3) / (N - 3).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

import toy.train_target as train_target_module
from toy.corpus import read_texts
from toy.tokenizer import load_tokenizer
from toy.train_target import drop_repetitive, repetition, train_target

WORDS = [f"w{i}" for i in range(40)]
ZOO_TOKENIZER = Path(__file__).resolve().parents[2] / "experiments" / "zoo" / "tokenizer" / \
    "tokenizer.json"


def word_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


@given(st.integers(1, 8), st.integers(1, 6))
def test_repeated_phrase_has_the_closed_form_rate(length, k):
    text = " ".join(WORDS[:length] * k)
    grams = k * length - 3
    expected = 1 - min(length, grams) / grams if grams > 0 else 0.0
    (kept, stats) = drop_repetitive([text], word_tokenizer(), 1.0)
    assert kept == [text] and stats["train_files_kept"] == 1
    assert repetition(word_tokenizer().encode(text).ids) == pytest.approx(expected)


def test_threshold_keeps_a_file_at_r_and_drops_it_above():
    tok = word_tokenizer()
    looped = " ".join(WORDS[:4] * 3)  # 12 ids, 9 4-grams, 4 distinct: 5 / 9
    distinct = " ".join(WORDS[10:30])  # 20 ids, no 4-gram twice: 0
    short = "w1 w2 w3"  # no 4-gram: 0
    assert repetition(tok.encode(looped).ids) == 5 / 9
    assert repetition(tok.encode(distinct).ids) == 0.0
    texts = [looped, distinct, short]
    assert drop_repetitive(texts, tok, 5 / 9)[0] == texts
    kept, stats = drop_repetitive(texts, tok, 0.55)
    assert kept == [distinct, short]
    assert stats == {"train_files_kept": 2, "train_files_dropped": 1,
                     "train_tokens_kept_frac": 23 / 35}
    assert drop_repetitive(texts, tok, 0.0)[0] == [distinct, short]
    with pytest.raises(ValueError, match="max_rep"):
        drop_repetitive(texts, tok, 1.5)


def test_train_target_filters_train_files_only(tmp_path, monkeypatch):
    """A micro run at R = the median file rate of 40 train files: the train stream is made
    of exactly the files at or below R (rates computed here with a Counter), validation of
    every validation file, and metrics count what was kept."""
    tok = load_tokenizer(ZOO_TOKENIZER)
    train = read_texts("train", max_files=40)
    ids = [e.ids for e in tok.encode_batch(train)]
    rates = [sum(c - 1 for c in Counter(zip(x, x[1:], x[2:], x[3:])).values())
             / max(len(x) - 3, 1) for x in ids]
    r = sorted(rates)[len(rates) // 2]
    expected = [t for t, rate in zip(train, rates) if rate <= r]
    assert 0 < len(expected) < len(train)
    encoded = []
    real_encode = train_target_module.encode_corpus
    monkeypatch.setattr(train_target_module, "encode_corpus",
                        lambda tk, texts: encoded.append(list(texts)) or real_encode(tk, texts))
    m = train_target("micro", tmp_path, tokenizer_path=ZOO_TOKENIZER, steps=2, max_files=40,
                     device="cpu", max_repetition=r)
    assert encoded == [expected, read_texts("validation", max_files=4)]
    kept_tokens = sum(len(x) for x, rate in zip(ids, rates) if rate <= r)
    assert m["max_repetition"] == r
    assert (m["train_files_kept"], m["train_files_dropped"]) == \
        (len(expected), len(train) - len(expected))
    assert m["train_tokens_kept_frac"] == pytest.approx(kept_tokens / sum(map(len, ids)))


def test_unfiltered_target_records_none_and_nothing_else(micro):
    _, records = micro
    m = records["target"]["metrics"]
    assert m["max_repetition"] is None
    assert not {"train_files_kept", "train_files_dropped", "train_tokens_kept_frac"} & set(m)


def test_repetition_cut_drops_the_most_repetitive_files_within_the_fraction():
    """Four files, worked out by hand: a = one word 20 times (20 ids, rate 16/17), b = 4
    words 5 times (20 ids, rate 1 - 4/17 = 13/17), c = 2 words 10 times (20 ids, rate
    1 - 2/17 = 15/17), d = 20 distinct words (20 ids, rate 0). Sorted: a, c, b, d; each file
    is a quarter of the tokens."""
    tok = word_tokenizer()
    texts = [" ".join(WORDS[:1] * 20), " ".join(WORDS[:4] * 5), " ".join(WORDS[:2] * 10),
             " ".join(WORDS[:20])]
    assert train_target_module.repetition_cut(texts, tok, 0.0) == pytest.approx(16 / 17)
    assert train_target_module.repetition_cut(texts, tok, 0.3) == pytest.approx(15 / 17)
    assert train_target_module.repetition_cut(texts, tok, 0.5) == pytest.approx(13 / 17)
    assert train_target_module.repetition_cut(texts, tok, 0.75) == 0.0
    kept, stats = drop_repetitive(texts, tok, train_target_module.repetition_cut(texts, tok, 0.5))
    assert kept == texts[1::2] and stats["train_tokens_kept_frac"] == 0.5
    with pytest.raises(ValueError, match="drop_frac"):
        train_target_module.repetition_cut(texts, tok, 1.0)
