"""Corpus of the toy world: the `.py` files of the running Python's standard library.

Files are split by a hash of their path relative to the stdlib root, so the split is
deterministic and a module never straddles two splits. The corpus is read from the
interpreter's own installation (`sysconfig`), so its texts follow the Python version (the
same split of each path, other file contents): training data is made from it on each
machine, and `fingerprint` records which corpus that was. Held-out prompts are read from
it only once: toy/eval_sets.py draws them and commits them, so every acceptance number is
measured on the same prompts whatever the machine.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from pathlib import Path

SPLITS = ("train", "validation", "test")
HELD_OUT_PERCENT = {"validation": 3, "test": 3}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(rel_path: str) -> str:
    """'train', 'validation' or 'test' for a path relative to the stdlib root."""
    bucket = int(hashlib.sha256(rel_path.encode()).hexdigest(), 16) % 100
    if bucket < HELD_OUT_PERCENT["test"]:
        return "test"
    if bucket < HELD_OUT_PERCENT["test"] + HELD_OUT_PERCENT["validation"]:
        return "validation"
    return "train"


def source_files(split: str, root: Path | None = None) -> list[Path]:
    """Sorted stdlib `.py` files of one split (site-packages excluded)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = root or stdlib_root()
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in path.parts or split_of(rel) != split:
            continue
        files.append(path)
    return files


def read_sources(split: str, root: Path | None = None, max_files: int | None = None
                 ) -> list[tuple[str, str]]:
    """(path relative to the stdlib root, decoded text) of one split's files, sorted by
    path; undecodable files are skipped."""
    root = root or stdlib_root()
    sources = []
    for path in source_files(split, root)[:max_files]:
        try:
            sources.append((path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return sources


def read_texts(split: str, root: Path | None = None, max_files: int | None = None) -> list[str]:
    """The decoded texts of one split; undecodable files are skipped."""
    return [text for _, text in read_sources(split, root, max_files)]


def fingerprint(split: str, max_files: int | None = None) -> dict:
    """What a split read by this interpreter is made of: its Python version, the file count
    and the sha256 of the split's "path sha256(text)" lines (two machines read the same
    corpus when these agree)."""
    sources = read_sources(split, max_files=max_files)
    lines = "".join(f"{rel} {hashlib.sha256(text.encode()).hexdigest()}\n"
                    for rel, text in sources)
    return {"python_version": platform.python_version(), "files": len(sources),
            "files_sha256": hashlib.sha256(lines.encode()).hexdigest()}
