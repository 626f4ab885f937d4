"""What a reproduce entry is (workbench/reproduce/cli.py runs them): one published claim, the
measure that computes the workbench's value, and what the measure found."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    """What one measure found: the value as the report prints it, whether the paper's claim
    holds on it (None: no workbench value yet), and the data it came from and the command
    that writes that data when they differ from the entry's (a committed prediction file
    replacing the simulator)."""

    value: str
    holds: bool | None
    data: str | None = None
    command: str | None = None


@dataclass(frozen=True)
class Entry:
    """One reproduced result. `paper` gives the published numbers and, after "claim:", the
    statement `measure` checks; `data` names the simulator setup or the committed files
    (GPU measurements prefixed "committed GPU data"); `command` regenerates that data."""

    name: str
    result: str
    paper: str
    data: str
    command: str
    measure: Callable[[], Outcome]
