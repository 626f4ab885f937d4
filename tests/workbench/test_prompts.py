"""Prompt files, token-id lists and stop strings of `python -m workbench decode`
(workbench/decode/prompts.py), on hand-written cases and the zoo's byte-level BPE tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.decode.prompts import (
    Prompt,
    UsageError,
    cut_at_stop,
    encode,
    load_tokenizer,
    parse_ids,
    read_prompt_file,
    stop_token_ids,
)

ZOO_TOKENIZER = Path(__file__).parents[2] / "experiments" / "zoo" / "tokenizer"


@pytest.mark.parametrize("text", ["1,2,3", "1 2 3", " 1, 2 ,3 ", "1\t2  3"])
def test_ids_separated_by_commas_or_spaces(text):
    assert parse_ids(text, "x") == (1, 2, 3)


@pytest.mark.parametrize("text", ["", " , ", "1,-2", "1.5", "1,x", "²"])
def test_anything_else_is_not_ids(text):
    with pytest.raises(UsageError, match="^here: .* is not a list of token ids"):
        parse_ids(text, "here")


@pytest.mark.parametrize(
    "text, stops, cut",
    [
        ("a b c d", ["c"], "a b "),
        ("a b c d", ["d", "b"], "a "),  # the earliest occurrence, not the first flag
        ("a b c d", ["x"], "a b c d"),
        ("stop", ["stop"], ""),
        ("x\n\ny", ["\n\n"], "x"),
    ],
)
def test_text_is_cut_before_the_earliest_stop(text, stops, cut):
    assert cut_at_stop(text, stops) == cut


def test_text_lines_keep_their_spaces_and_skip_blank_lines(tmp_path):
    file = tmp_path / "p.txt"
    file.write_text("  indented\n\n\t\nlast ")
    got = read_prompt_file(str(file))
    assert [(p.text, p.where) for p in got] == [
        ("  indented", f"{file} line 1"),
        ("last ", f"{file} line 4"),
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 2: not valid JSON"),
        ('{"source": "x"}', "line 2: expected a string, a list of token ids or an object"),
        ("[1, -2]", "line 2: expected"),
        ("[]", "line 2: expected"),
        ("[1, true]", "line 2: expected"),
        ("3", "line 2: expected"),
    ],
)
def test_bad_json_lines_are_named(tmp_path, line, message):
    file = tmp_path / "p.jsonl"
    file.write_text(f'"fine"\n{line}\n')
    with pytest.raises(UsageError, match=message):
        read_prompt_file(str(file))


def test_ids_from_json_lines_refuse_text(tmp_path):
    file = tmp_path / "p.jsonl"
    file.write_text('{"text": "only text"}\n')
    with pytest.raises(UsageError, match="line 1: expected a list of token ids"):
        read_prompt_file(str(file), ids=True)


def test_zoo_tokenizer_stops_on_single_tokens_only():
    tok = load_tokenizer(ZOO_TOKENIZER)
    newline = tok.token_to_id("Ċ")  # byte-level BPE spells "\n" as "Ċ"
    eot = 0  # toy/tokenizer.py reserves id 0 for <|endoftext|>
    assert stop_token_ids(tok, ["<|endoftext|>", "\n", "return x"]) == [eot, newline]


def test_encode_checks_ids_against_the_target_vocabulary():
    tok = load_tokenizer(ZOO_TOKENIZER)
    prompts = [Prompt("a", text="x = 1"), Prompt("b", ids=(5, 6))]
    ids = encode(prompts, tok, 4096)
    assert ids[1] == [5, 6] and tok.decode(ids[0]) == "x = 1"
    with pytest.raises(UsageError, match="^b: token id 6 is outside the target's vocabulary"):
        encode(prompts[1:], tok, 6)
