"""Prompts and text of `python -m workbench decode`: prompt files, token ids, the tokenizer,
stop strings.

Pure stdlib, plus the `tokenizers` library when a tokenizer is loaded, so the command reads
and checks its input before it imports torch. A prompt file holds one prompt per non-blank
line: text, or with `ids=True` token ids separated by commas or spaces. A `.jsonl` file
holds one JSON value per line: a string (text), a list of ints (ids), or an object with
"text" and/or "ids" (the zoo's prompt sets); of an object, "ids" is taken when ids are asked
for or there is no "text". Every error is a `UsageError` whose one line names the file and
line, or the argument.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class UsageError(ValueError):
    """Bad command-line input; the message (one line) names the argument or the file."""


@dataclass(frozen=True)
class Prompt:
    """One prompt: `text` to encode, or token `ids`; `where` names its source in errors."""

    where: str
    text: str | None = None
    ids: tuple[int, ...] | None = None


def parse_ids(text: str, where: str) -> tuple[int, ...]:
    """Token ids from "1,2,3" or "1 2 3" (non-negative ints, at least one)."""
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items or not all(re.fullmatch(r"[0-9]+", t) for t in items):
        raise UsageError(
            f"{where}: {text.strip()[:40]!r} is not a list of token ids "
            "(non-negative ints separated by commas or spaces)"
        )
    return tuple(int(t) for t in items)


def _json_prompt(value, where: str, ids: bool) -> Prompt:
    if isinstance(value, dict):
        value = (
            value["ids"] if "ids" in value and (ids or "text" not in value) else value.get("text")
        )
    if isinstance(value, str) and not ids:
        return Prompt(where, text=value)
    if isinstance(value, list) and value and all(type(v) is int and v >= 0 for v in value):
        return Prompt(where, ids=tuple(value))
    want = "a list of token ids" if ids else "a string, a list of token ids"
    raise UsageError(f"{where}: expected {want} or an object with 'text' or 'ids'")


def read_prompt_file(path: str, ids: bool = False) -> list[Prompt]:
    """Every prompt of the file `path` (format in the module docstring), in file order."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(
            f"--prompts: {path} not found"
            if not file.exists()
            else f"--prompts: {path} is not a file"
        )
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"--prompts: {path} is not UTF-8 text ({e.reason})") from e
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        if file.suffix == ".jsonl":
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{where}: not valid JSON ({e.msg})") from e
            out.append(_json_prompt(value, where, ids))
        else:
            out.append(
                Prompt(where, ids=parse_ids(line, where)) if ids else Prompt(where, text=line)
            )
    if not out:
        raise UsageError(f"--prompts: {path} holds no prompt (every line is blank)")
    return out


def load_tokenizer(path: str | Path, argument: str = "--tokenizer"):
    """A `tokenizers.Tokenizer` from a tokenizer.json file, or from a folder holding one."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise UsageError(f"{argument}: text needs the tokenizers library ({e})") from e
    file = Path(path)
    file = file / "tokenizer.json" if file.is_dir() else file
    if not file.is_file():
        raise UsageError(f"{argument}: {file} not found")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises a bare Exception for any malformed file
        raise UsageError(
            f"{argument}: {file} is not a tokenizers-library tokenizer.json ({e})"
        ) from e


def encode(prompts: Sequence[Prompt], tokenizer, vocab_size: int) -> list[list[int]]:
    """Token ids of every prompt (text through `tokenizer`), each id checked against the
    target's vocabulary [0, vocab_size)."""
    out = []
    for p in prompts:
        if p.ids is not None:
            ids = list(p.ids)
        elif tokenizer is None:
            raise UsageError(f"{p.where}: a text prompt needs a tokenizer")
        else:
            ids = tokenizer.encode(p.text).ids
            if not ids:
                raise UsageError(f"{p.where}: the text {p.text!r} encodes to no token")
        bad = [i for i in ids if i >= vocab_size]
        if bad:
            raise UsageError(
                f"{p.where}: token id {bad[0]} is outside the target's vocabulary [0, {vocab_size})"
            )
        out.append(ids)
    return out


def stop_token_ids(tokenizer, stops: Sequence[str]) -> list[int]:
    """The stop strings the engine can stop on: those that are one token whose text is the
    string itself; the others only cut the text (`cut_at_stop`) after the decode."""
    out = []
    for s in stops:
        ids = tokenizer.encode(s, add_special_tokens=False).ids
        if len(ids) == 1 and tokenizer.decode(ids, skip_special_tokens=False) == s:
            out.append(ids[0])
    return out


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """`text` up to (not including) the earliest occurrence of any stop string."""
    ends = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[: min(ends)] if ends else text
