"""Committed evaluation prompts: the validation and test sets every acceptance number uses.

    python -m toy.eval_sets --out experiments/zoo/prompts [--python python3.12]

The held-out corpus is an interpreter's standard library (toy/corpus.py), so prompts drawn
from it differ between Python versions. This module draws them once, by the acceptance
experiment's rule (`toy.gen_data.split_prompts`: windows of 64-256 tokens, files drawn by
length), 512 prompts a seed (seed 1 for prompts 0-511, seed 2 for 512-1023, ...: a larger
set begins with the smaller one, so numbers measured on the first 512 stay comparable), and
writes them as files that every machine reads alike:
`prompts-<split>.jsonl`, one prompt a line `{"id", "source", "text", "ids"}` (source: the
file's path relative to the stdlib root; text: the ids decoded, for reading), and
`manifest.json` (each file's sha256, the tokenizer's sha256, the rule, the count, the
Python version drawn from and the command). `--python` names another interpreter whose
stdlib to read (only its stdlib is used; it needs no packages).

`held_out_prompts` is what the experiments call: the committed set by default, the corpus
of this interpreter on request (prompt rules or tokenizers the sets were not drawn for).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

from toy.gen_data import split_prompts, split_sources, window_picks
from toy.tokenizer import load_tokenizer
from toy.zoo import sha256_file

SETS = Path(__file__).resolve().parents[1] / "experiments" / "zoo" / "prompts"
ZOO_TOKENIZER = SETS.parent / "tokenizer" / "tokenizer.json"
HELD_OUT = ("validation", "test")
PROMPT_LEN = (64, 256)
SEED = 1  # the acceptance experiment's cfg.seed + 1: the first draw's
PER_SEED = 512  # prompts drawn with one seed; the next PER_SEED with seed + 1


def draw(tok, split: str, n: int, prompt_len: tuple[int, int] = PROMPT_LEN,
         seed: int = SEED, root: Path | None = None) -> list[dict]:
    """n prompts of one split as records {"id", "source", "text", "ids"}: the windows of
    `split_prompts` with the same arguments, with the file each was cut from."""
    lo, hi = prompt_len
    sources = [(rel, ids) for rel, ids in split_sources(tok, split, min_tokens=lo, root=root)]
    picks = window_picks([len(ids) for _, ids in sources], n, lo, hi, seed)
    records = []
    for k, (i, start, length) in enumerate(picks):
        rel, ids = sources[i]
        window = ids[start : start + length]
        records.append({"id": f"{split}-{k:04d}", "source": rel, "text": tok.decode(window),
                        "ids": window})
    return records


def interpreter_stdlib(python: str) -> tuple[str, Path]:
    """(version, stdlib root) of the interpreter `python` (a command on PATH or a path)."""
    code = "import platform, sysconfig; print(platform.python_version()); " \
           "print(sysconfig.get_paths()['stdlib'])"
    version, root = subprocess.run([python, "-c", code], capture_output=True, text=True,
                                   check=True).stdout.split("\n")[:2]
    return version, Path(root)


def draw_set(tok, split: str, n: int, root: Path | None = None) -> list[dict]:
    """n prompts of one split, PER_SEED a seed from SEED on (module docstring), numbered
    `<split>-0000` on."""
    records = []
    for k, start in enumerate(range(0, n, PER_SEED)):
        part = draw(tok, split, min(PER_SEED, n - start), seed=SEED + k, root=root)
        records += [dict(r, id=f"{split}-{start + i:04d}") for i, r in enumerate(part)]
    return records


def write_sets(out: Path, tokenizer_path: Path, n: int, python: str | None,
               command: str) -> dict:
    """Draw both held-out splits, write their jsonl files and the manifest; returns it."""
    version, root = interpreter_stdlib(python) if python else (platform.python_version(), None)
    tok = load_tokenizer(tokenizer_path)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for split in HELD_OUT:
        path = out / f"prompts-{split}.jsonl"
        with path.open("w") as f:
            for record in draw_set(tok, split, n, root=root):
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
        files[path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size,
                            "prompts": n}
    manifest = {"files": files, "tokenizer_sha256": sha256_file(tokenizer_path),
                "prompt_len": list(PROMPT_LEN), "seed": SEED, "per_seed": PER_SEED,
                "python_version": version,
                "rule": "toy.gen_data.split_prompts(tok, split, 512, prompt_len, seed) for seed "
                        "1, 2, ... until n: files of the split with >= 64 tokens drawn by "
                        "token count, window length uniform in 64..min(256, file), start "
                        "uniform",
                "command": command}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def verify_sets(folder: Path = SETS) -> list[str]:
    """Files whose sha256 or presence disagrees with the manifest (empty: all good)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    return [name for name, entry in manifest["files"].items()
            if not (folder / name).is_file() or sha256_file(folder / name) != entry["sha256"]]


def load_set(split: str, folder: Path = SETS) -> list[dict]:
    """The records of one committed split, after checking every file against the
    manifest (a changed file would silently change every number measured on it)."""
    bad = verify_sets(folder)
    if bad:
        raise ValueError(f"{folder}: {bad} disagree with manifest.json")
    with (folder / f"prompts-{split}.jsonl").open() as f:
        return [json.loads(line) for line in f]


def committed_prompts(split: str, n: int, tokenizer_path: Path, folder: Path = SETS
                      ) -> list[list[int]]:
    """The first n prompts of a committed split as token ids (n, len_i): the stored ids
    when `tokenizer_path` is the tokenizer they were made with, else the stored texts
    encoded by it (the same text, other ids; said on stdout)."""
    records = load_set(split, folder)
    if n > len(records):
        raise ValueError(f"{split}: {n} prompts asked, the committed set holds {len(records)}")
    manifest = json.loads((folder / "manifest.json").read_text())
    if sha256_file(tokenizer_path) == manifest["tokenizer_sha256"]:
        return [r["ids"] for r in records[:n]]
    print(f"eval_sets: {tokenizer_path} is not the tokenizer of {folder}; encoding the "
          f"committed texts with it", flush=True)
    return [e.ids for e in load_tokenizer(tokenizer_path).encode_batch(
        [r["text"] for r in records[:n]])]


def held_out_prompts(tokenizer_path: Path, split: str, n: int, *, source: str = "committed",
                     prompt_len: tuple[int, int] = PROMPT_LEN, seed: int = SEED,
                     max_files: int | None = None, folder: Path = SETS) -> list[list[int]]:
    """n held-out prompts (token ids) of `split`: the first n of the committed set (source
    "committed": drawn at PROMPT_LEN from every file, seeds SEED on; `seed` is then unused) or
    drawn from this interpreter's corpus (source "corpus", `split_prompts`)."""
    if source == "corpus":
        return split_prompts(load_tokenizer(tokenizer_path), split, n, tuple(prompt_len), seed,
                             max_files)
    if source != "committed":
        raise ValueError(f"prompt source must be 'committed' or 'corpus', got {source!r}")
    if (tuple(prompt_len), max_files) != (PROMPT_LEN, None):
        raise ValueError(f"the committed sets were drawn at prompt_len {list(PROMPT_LEN)} from "
                         f"every file; for prompt_len {list(prompt_len)} and max_files "
                         f"{max_files} draw from the corpus (prompts=corpus)")
    return committed_prompts(split, n, Path(tokenizer_path), folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SETS)
    ap.add_argument("--tokenizer", type=Path, default=ZOO_TOKENIZER)
    ap.add_argument("--num-prompts", type=int, default=1024, help="per split")
    ap.add_argument("--python", default=None,
                    help="read this interpreter's stdlib (default: the running one's)")
    args = ap.parse_args()
    command = "python -m toy.eval_sets " + " ".join(sys.argv[1:])
    manifest = write_sets(args.out, args.tokenizer, args.num_prompts, args.python, command)
    total = sum(f["bytes"] for f in manifest["files"].values())
    print(f"eval_sets: {args.num_prompts} prompts per split from Python "
          f"{manifest['python_version']}, {total / 2**20:.2f} MB")


if __name__ == "__main__":
    main()
