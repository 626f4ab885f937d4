"""One-line errors for the workbench's commands: argument types with their accepted range,
a parser whose errors are one line, the GPU check of the GPU-only commands, and the check
that an output folder holds no earlier results.

A bad value ends as `<prog>: error: argument --x: ...` (argparse's own wording, its usage
block left out) and exit status 2; a `UserError` raised anywhere in a command ends as
`<command> error: <message>` (workbench/__main__.py). Stdlib only: the GPU machine runs the
benches through it without hydra or simpy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


class UserError(Exception):
    """A bad input or an unfit machine: the message is the whole story (no traceback)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with every error one line on stderr (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _number(kind: type, text: str) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None


def ranged(kind: type, lo: float | None = None, hi: float | None = None,
           open_lo: bool = False) -> Callable[[str], float]:
    """An argparse type: `kind` (int or float) in [lo, hi] ((lo, hi] when open_lo)."""
    def parse(text: str):
        x = _number(kind, text)
        below = lo is not None and (x <= lo if open_lo else x < lo)
        if below or (hi is not None and x > hi) or x != x:
            word = "outside" if hi is not None else "not"
            raise argparse.ArgumentTypeError(f"{text} is {word} {span(lo, hi, open_lo)}")
        return x
    parse.__name__ = kind.__name__
    return parse


def span(lo: float | None, hi: float | None, open_lo: bool = False) -> str:
    """The accepted range in words: "[1, 256]", ">= 1", "> 0"."""
    if hi is None:
        return f"{'>' if open_lo else '>='} {lo}"
    return f"{'(' if open_lo else '['}{'-inf' if lo is None else lo}, {hi}]"


def int_list(lo: int, hi: int) -> Callable[[str], str]:
    """An argparse type: comma-separated integers, each in [lo, hi], at least one; returns
    them comma-joined ("1, 4" -> "1,4")."""
    one = ranged(int, lo, hi)

    def parse(text: str) -> str:
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r} holds no value (e.g. 1,4,16)")
        return ",".join(str(one(t.strip())) for t in items)
    parse.__name__ = "list of integers"
    return parse


def name_list(choices: Iterable[str]) -> Callable[[str], str]:
    """An argparse type: comma-separated names, each one of `choices`, at least one;
    returns them comma-joined."""
    allowed = tuple(choices)

    def parse(text: str) -> str:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{text!r}: each name must be one of {', '.join(allowed)}")
        return ",".join(items)
    parse.__name__ = "list of names"
    return parse


def need_cuda(device: str | None, command: str, smoke: str) -> str:
    """The device to run on: `device`, or cuda when there is one (else the CPU). Raises
    UserError in one line when `device` asks for CUDA and the machine has none, naming the
    command's CPU smoke run (`smoke`)."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{command} needs a CUDA GPU (--device {device}) and this machine has "
                        f"none; the CPU smoke run: {smoke}")
    return device


def fresh_output(folder: str | Path, names: Iterable[str], flag: str = "--out") -> None:
    """Raises UserError in one line when `folder` already holds one of `names` (the files or
    folders a command writes there), before anything is written: a run never overwrites an
    earlier run's results (simulate's run folders refuse the same way: workbench/rundir.py).
    Files of other names beside them are left alone and do not count."""
    taken = [n for n in names if (Path(folder) / n).exists()]
    if taken:
        raise UserError(f"{flag} {folder} already holds results ({', '.join(taken)}); "
                        "nothing was written: pick a new folder")


def run_main(name: str, main: Callable[[], int | None]) -> int:
    """`main()`'s exit status, a UserError as one line on stderr (status 2), Ctrl-C as one
    line (status 130), and output cut short by a closed pipe (`--help | head`) as success."""
    try:
        return int(main() or 0)
    except UserError as e:
        print(f"{name} error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
