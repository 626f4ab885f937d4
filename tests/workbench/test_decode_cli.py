"""`python -m workbench decode` with text: tokenized by the model's own tokenizer, every prompt
of a file decoded in batches, stop strings, and one line with exit status 2 for bad input.

Two tiny fp32 Qwen3 targets written by transformers' `save_pretrained`, with a WordLevel
tokenizer over sixteen number words (id i is WORDS[i]; decode joins words with spaces):
`random_dir` keeps transformers' random initialisation (its completions are checked against
`reference.generate` called directly, decoded by the tokenizer), `successor_dir` carries
`random_state_dict`'s planted rule (greedy decoding of token t gives t+1), so its
completions are written down by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import Qwen3Config, Qwen3ForCausalLM

from reference.config import ModelConfig
from reference.generate import generate
from reference.loaders import load_target, random_state_dict
from tests.reference.conftest import drafter_config, write_drafter
from workbench.decode.cli import main

ROOT = Path(__file__).parents[2]
WORDS = [
    "[UNK]",
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
]
SHAPE = dict(
    vocab_size=len(WORDS),
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=128,
    tie_word_embeddings=False,
)
HEADER = re.compile(r"^\[(\d+)/(\d+)\] (.*): (\d+) prompt tokens, (\d+) new tokens, (\d+) rounds")


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def _write(path: Path, state: dict | None = None) -> Path:
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**SHAPE)).eval()
    if state is not None:
        model.load_state_dict(state, strict=False)
    model.save_pretrained(path)
    _tokenizer().save(str(path / "tokenizer.json"))
    return path


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("random"))


@pytest.fixture(scope="module")
def successor_dir(tmp_path_factory) -> Path:
    cfg = ModelConfig.from_dict(SHAPE)
    return _write(tmp_path_factory.mktemp("successor"), random_state_dict(cfg, dtype=torch.float32))


def _decode(capsys, *argv) -> list[dict]:
    """Run the command in-process; its requests as dicts (header fields, the next line)."""
    assert main([*argv, "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if m:
            out.append(
                dict(
                    index=int(m[1]),
                    total=int(m[2]),
                    where=m[3],
                    prompt=int(m[4]),
                    new=int(m[5]),
                    rounds=int(m[6]),
                    tau="tau" in line,
                    text=lines[i + 1],
                    after=lines[i + 2],
                )
            )
    return out


@pytest.mark.parametrize("method", [[], ["--method", "oracle:tau=2,block_size=4"], "drafter"])
def test_text_equals_the_decoded_ids_of_a_direct_generate(capsys, random_dir, tmp_path, method):
    prompts = ["one two three", "seven", "four four nine ten"]
    tok = _tokenizer()
    ids = [tok.encode(p).ids for p in prompts]
    expected = generate(load_target(random_dir), ids, max_new_tokens=7).tokens
    if method == "drafter":
        write_drafter(
            tmp_path / "drafter",
            drafter_config({**SHAPE, "rope_theta": 1e6}, block_size=4, target_layer_ids=(0, 1)),
        )
        method = ["--drafter", str(tmp_path / "drafter")]
    argv = [str(random_dir), *method, "--max-new-tokens", "7", "--batch-size", "2", "--show-ids"]
    for p in prompts:
        argv += ["--prompt", p]
    got = _decode(capsys, *argv)
    assert [r["index"] for r in got] == [1, 2, 3] and all(r["total"] == 3 for r in got)
    for r, x, new in zip(got, ids, expected):
        assert r["text"] == tok.decode(new, skip_special_tokens=False)
        assert r["after"] == "ids: " + " ".join(map(str, new))
        assert (r["prompt"], r["new"], r["tau"]) == (len(x), len(new), bool(method))


def test_every_line_of_a_file_is_decoded_in_batches(capsys, successor_dir, tmp_path):
    file = tmp_path / "p.txt"
    file.write_text("one\ntwo three\n\nfour\nfive six seven\n eight \n")
    got = _decode(
        capsys,
        str(successor_dir),
        "--prompts",
        str(file),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "3",
    )
    assert [r["text"] for r in got] == [
        "two three four",
        "four five six",
        "five six seven",
        "eight nine ten",
        "nine ten eleven",
    ]
    assert [r["where"] for r in got] == [f"{file} line {n}" for n in (1, 2, 4, 5, 6)]
    assert [r["prompt"] for r in got] == [1, 2, 1, 3, 1]


def test_id_files_and_json_lines(capsys, successor_dir, tmp_path):
    ids = tmp_path / "p.txt"
    ids.write_text("3, 4\n9 10\n")
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('"three four"\n[9, 10]\n{"text": "one", "ids": [12]}\n')
    jsonl_ids = tmp_path / "ids.jsonl"
    jsonl_ids.write_text('[3]\n{"text": "one", "ids": [12]}\n')
    new = ["--max-new-tokens", "2"]
    by_ids = _decode(capsys, str(successor_dir), "--prompts", str(ids), "--ids", *new)
    by_json = _decode(capsys, str(successor_dir), "--prompts", str(jsonl), *new)
    by_json_ids = _decode(capsys, str(successor_dir), "--prompts", str(jsonl_ids), "--ids", *new)
    assert [r["text"] for r in by_ids] == ["four five", "ten eleven"]  # id i is WORDS[i]
    assert [r["text"] for r in by_json] == ["five six", "ten eleven", "two three"]
    assert [r["text"] for r in by_json_ids] == ["three four", "twelve thirteen"]


def test_stop_strings_cut_the_text_and_one_token_stops_the_engine(capsys, successor_dir):
    base = [str(successor_dir), "--prompt", "one two", "--max-new-tokens", "8"]
    (one_token,) = _decode(capsys, *base, "--stop", "five")
    assert (one_token["text"], one_token["new"]) == ("three four ", 3)
    (two_tokens,) = _decode(capsys, *base, "--stop", "four fi")
    assert (two_tokens["text"], two_tokens["new"]) == ("three ", 8)
    (earliest,) = _decode(capsys, *base, "--stop", "seven", "--stop", "four fi")
    assert (earliest["text"], earliest["new"]) == ("three ", 5)


def test_random_targets_print_ids_and_say_so_once(capsys):
    assert (
        main(
            [
                "random:tiny",
                "--prompt-ids",
                "3,4",
                "--prompt-ids",
                "7 8 9",
                "--max-new-tokens",
                "3",
                "--batch-size",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("no tokenizer") == 1
    # random:tiny plants the successor rule as well
    assert "\nids: 5 6 7\n" in out and "\nids: 10 11 12\n" in out


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def bad_dirs(tmp_path_factory, random_dir):
    root = tmp_path_factory.mktemp("bad")
    cfg = json.loads((random_dir / "config.json").read_text())
    for name, config, weights in [
        ("corrupt", '{"hidden_size": ', None),
        (
            "llama",
            json.dumps({**cfg, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}),
            None,
        ),
        ("truncated", json.dumps(cfg), (random_dir / "model.safetensors").read_bytes()[:999]),
        ("untokenized", json.dumps(cfg), (random_dir / "model.safetensors").read_bytes()),
    ]:
        (root / name).mkdir()
        (root / name / "config.json").write_text(config)
        if weights is not None:
            (root / name / "model.safetensors").write_bytes(weights)
    (root / "empty.txt").write_text("\n  \n")
    (root / "ids.txt").write_text("1, 2\nthree\n")
    return root


@pytest.mark.parametrize(
    "argv, named",
    [
        (["random:tiny", "--temperature", "-1"], "argument --temperature: must be >= 0"),
        (["random:tiny", "--top-p", "0"], "argument --top-p: must be in (0, 1]"),
        (["random:tiny", "--top-p", "1.5"], "argument --top-p"),
        (["random:tiny", "--top-k", "-2"], "argument --top-k"),
        (["random:tiny", "--max-new-tokens", "0"], "argument --max-new-tokens: must be >= 1"),
        (["random:tiny", "--batch-size", "0"], "argument --batch-size: must be >= 1"),
        (["random:tiny", "--prompts", "{bad}/nope.txt"], "--prompts: {bad}/nope.txt not found"),
        (["random:tiny", "--prompts", "{bad}/empty.txt"], "{bad}/empty.txt holds no prompt"),
        (["random:tiny", "--prompts", "{bad}/ids.txt", "--ids"], "{bad}/ids.txt line 2: 'three'"),
        (
            ["random:tiny", "--prompt-ids", "1,x"],
            "--prompt-ids 1: '1,x' is not a list of token ids",
        ),
        (["{bad}/missing"], "{bad}/missing not found"),
        (["{bad}/corrupt"], "{bad}/corrupt/config.json is not valid JSON"),
        (["{bad}/llama"], "architecture LlamaForCausalLM is not supported (supported: Qwen3"),
        (["{bad}/truncated", "--prompt-ids", "1"], "{bad}/truncated/model.safetensors is not a"),
        (["{bad}/untokenized", "--prompt", "one"], "--prompt 1: a text prompt needs a tokenizer"),
        (
            ["{bad}/untokenized", "--prompt", "one", "--tokenizer", "{bad}/no.json"],
            "--tokenizer: {bad}/no.json not found",
        ),
        (
            ["{bad}/untokenized", "--prompt", "one", "--tokenizer", "{bad}/empty.txt"],
            "{bad}/empty.txt is not a tokenizers-library tokenizer.json",
        ),
        (["random:tiny", "--prompt-ids", "256"], "token id 256 is outside the target's vocabulary"),
        (
            ["random:tiny", "--prompt-len", "3997", "--max-new-tokens", "100"],
            "exceed the target's max_position_embeddings 4096",
        ),
        (["random:tiny", "--method", "nope"], "--method: unknown method 'nope'"),
        (["random:tiny", "--method", "oracle:tau=2", "--drafter", "random"], "not both"),
        (["random:tiny", "--device", "cuda"], "--device cuda: no CUDA device"),
        (["random:tiny", "--device", "gpu0"], "--device gpu0: not a device name"),
    ],
)
def test_bad_input_is_one_line_naming_it(capsys, monkeypatch, bad_dirs, argv, named):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [a.replace("{bad}", str(bad_dirs)) for a in argv]
    defaults = {"--device": "cpu", "--max-new-tokens": "4"}
    err = _error(
        capsys, [*argv, *(x for k, v in defaults.items() if k not in argv for x in (k, v))]
    )
    assert err.startswith("python -m workbench decode: error: ")
    assert named.replace("{bad}", str(bad_dirs)) in err, err


def _without_torch(*argv: str) -> subprocess.CompletedProcess:
    code = (
        "import sys; sys.modules['torch'] = None; from workbench.__main__ import main; "
        f"sys.exit(main(['decode', *{list(argv)!r}]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_help_and_argument_errors_come_before_torch_is_imported():
    shown = _without_torch("--help")
    assert shown.returncode == 0 and "--prompts FILE" in shown.stdout, shown.stderr
    refused = _without_torch("random:tiny", "--temperature", "-1")
    assert refused.returncode == 2 and "--temperature" in refused.stderr
