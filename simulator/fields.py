"""Dataclass fields with their allowed range or choices, and the check of one value.

`param` is how every simulator parameter is declared (simulator/params.py's sections and
each method's own options, simulator/methods/); `check_field` checks a value against the
range or choices in its field's metadata and raises `ConfigError` naming the key
(`spec.options.tree_budget = 0 is outside [1, 4096]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from simulator.errors import ConfigError

BIG = 1 << 30


def param(default: Any, lo: float | None = None, hi: float | None = None,
          choices: tuple | None = None, doc: str = "") -> Any:
    """A dataclass field with its allowed range (inclusive) or choices."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "doc": doc}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def check_field(key: str, value: Any, meta: Mapping) -> None:
    """Raise `ConfigError` naming `key` if `value` (or an item of a list) is outside the
    range or choices of `meta`; None passes."""
    lo, hi, choices = meta.get("lo"), meta.get("hi"), meta.get("choices")
    if value is None:
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_field(f"{key}[{i}]", v, meta)
        return
    if choices is not None and value not in choices:
        raise ConfigError(f"{key} = {value!r} is not one of {list(choices)}")
    if lo is None and hi is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{key} = {value!r} must be a number in [{lo}, {hi}]")
    if not (lo <= value <= hi):
        raise ConfigError(f"{key} = {value!r} is outside [{lo}, {hi}]")
