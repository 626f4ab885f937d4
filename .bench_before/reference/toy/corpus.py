"""Corpus of the toy world: the `.py` files of the running Python's standard library.

Files are split by a hash of their path relative to the stdlib root, so the split is
deterministic and a module never straddles two splits. Nothing of the corpus is committed:
it is read from the interpreter's own installation (`sysconfig`), so its texts follow the
Python version: 3.12 on the GPU machine, where every committed number was measured, 3.11 in
CI (the same split of each path, other file contents and other prompts).
"""

from __future__ import annotations

import hashlib
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


def read_texts(split: str, root: Path | None = None, max_files: int | None = None) -> list[str]:
    """The decoded texts of one split; undecodable files are skipped."""
    texts = []
    for path in source_files(split, root)[:max_files]:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts
