"""toy/eval_sets.py: the committed held-out prompt sets, their manifest, and that the
acceptance experiment reads them by default (never the running interpreter's corpus)."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from experiments.acceptance import AcceptanceConfig, config_without_hydra, run
from toy import eval_sets
from toy.gen_data import split_prompts
from toy.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
SETS = ROOT / "experiments" / "zoo" / "prompts"
ZOO = ROOT / "experiments" / "zoo"


def _file_ids(split: str) -> list[list[int]]:
    with (SETS / f"prompts-{split}.jsonl").open() as f:
        return [json.loads(line)["ids"] for line in f]


def test_committed_sets_match_their_manifest():
    manifest = json.loads((SETS / "manifest.json").read_text())
    assert set(manifest["files"]) == {"prompts-validation.jsonl", "prompts-test.jsonl"}
    for name, entry in manifest["files"].items():
        data = (SETS / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert data.count(b"\n") == entry["prompts"] == 1024
    tok_bytes = (ZOO / "tokenizer" / "tokenizer.json").read_bytes()
    assert manifest["tokenizer_sha256"] == hashlib.sha256(tok_bytes).hexdigest()
    assert manifest["prompt_len"] == [64, 256] and manifest["python_version"].startswith("3.")
    assert sum(e["bytes"] for e in manifest["files"].values()) < 3 * 2**20
    assert eval_sets.verify_sets(SETS) == []


def test_records_hold_windows_of_the_rule():
    tok = load_tokenizer(ZOO / "tokenizer" / "tokenizer.json")
    with (SETS / "prompts-test.jsonl").open() as f:
        records = [json.loads(line) for line in f]
    assert [r["id"] for r in records] == [f"test-{k:04d}" for k in range(1024)]
    for r in records[:50]:
        assert 64 <= len(r["ids"]) <= 256 and r["source"].endswith(".py")
        assert r["text"] == tok.decode(r["ids"])


def test_loaded_prompts_are_the_files_ids():
    tok_path = ZOO / "tokenizer" / "tokenizer.json"
    for split in ("validation", "test"):
        assert eval_sets.committed_prompts(split, 1024, tok_path, SETS) == _file_ids(split)
    assert eval_sets.held_out_prompts(tok_path, "test", 7) == _file_ids("test")[:7]
    with pytest.raises(ValueError, match="holds 1024"):
        eval_sets.committed_prompts("test", 1025, tok_path, SETS)
    with pytest.raises(ValueError, match="prompts=corpus"):
        eval_sets.held_out_prompts(tok_path, "test", 3, prompt_len=(8, 24))


def test_a_changed_file_is_refused(tmp_path):
    shutil.copytree(SETS, tmp_path / "sets")
    path = tmp_path / "sets" / "prompts-test.jsonl"
    path.write_text(path.read_text().replace('"ids":[', '"ids":[0,', 1))
    assert eval_sets.verify_sets(tmp_path / "sets") == ["prompts-test.jsonl"]
    with pytest.raises(ValueError, match="disagree"):
        eval_sets.load_set("test", tmp_path / "sets")


def test_another_tokenizer_encodes_the_committed_texts(micro):
    out, _ = micro
    tok_path = out / "tokenizer" / "tokenizer.json"
    got = eval_sets.committed_prompts("validation", 3, tok_path, SETS)
    with (SETS / "prompts-validation.jsonl").open() as f:
        texts = [json.loads(next(f))["text"] for _ in range(3)]
    assert got == [load_tokenizer(tok_path).encode(t).ids for t in texts]


def test_draw_is_the_acceptance_rule_with_sources():
    """`draw` on this interpreter's stdlib gives split_prompts' windows, each cut from the
    file it names."""
    tok = load_tokenizer(ZOO / "tokenizer" / "tokenizer.json")
    records = eval_sets.draw(tok, "test", 12)
    assert [r["ids"] for r in records] == split_prompts(tok, "test", 12, (64, 256), seed=1)
    root = eval_sets.interpreter_stdlib("python")[1]
    for r in records[:4]:
        whole = tok.encode((root / r["source"]).read_text(encoding="utf-8")).ids
        assert any(whole[i:i + len(r["ids"])] == r["ids"] for i in range(len(whole)))


def test_a_larger_set_begins_with_the_smaller_one(monkeypatch):
    """Prompts come PER_SEED a seed: n = PER_SEED + 3 repeats the n = PER_SEED set and then
    adds 3 windows of the next seed, numbered on (so numbers measured on the first 512
    committed prompts hold for the first 512 of the 1024)."""
    monkeypatch.setattr(eval_sets, "PER_SEED", 5)
    tok = load_tokenizer(ZOO / "tokenizer" / "tokenizer.json")
    small, large = eval_sets.draw_set(tok, "test", 5), eval_sets.draw_set(tok, "test", 8)
    assert large[:5] == small
    assert [r["ids"] for r in large[5:]] == split_prompts(tok, "test", 3, (64, 256), seed=2)
    assert [r["id"] for r in large] == [f"test-{k:04d}" for k in range(8)]


def test_default_acceptance_reads_the_committed_sets(tmp_path, monkeypatch):
    """The default config decodes the committed prompts: the corpus is never read (its
    reader raises here) and the requests' prompt lengths are the file's."""
    cfg = config_without_hydra([])
    assert (cfg.prompts, Path(cfg.prompt_sets)) == ("committed", Path("experiments/zoo/prompts"))
    assert AcceptanceConfig().prompts == "committed"

    def no_corpus(*args, **kwargs):
        raise AssertionError("the default path read the corpus")

    monkeypatch.setattr("toy.gen_data.read_sources", no_corpus)
    monkeypatch.setattr("toy.gen_data.split_prompts", no_corpus)
    monkeypatch.chdir(ROOT)
    small = AcceptanceConfig(artifacts=str(ZOO), drafters=["dflash-b8"], splits=["test"],
                             temperatures=[0.0], num_prompts=3, max_new_tokens=4,
                             plots=False, warm_up=False, device="cpu")
    run(small, tmp_path)
    with (tmp_path / "requests.csv").open() as f:
        lens = [int(r["prompt_len"]) for r in csv.DictReader(f)]
    assert lens == [len(ids) for ids in _file_ids("test")[:3]]
