"""The methods seam of the reference engine: every drafting/verification method registers a
factory here by name, and every driver builds proposers only through `reference.methods.build`.

A method is named by a `MethodSpec`: its registered name and its options (a drafter folder,
a block size, an oracle's tau, a self-speculative stride, ...). Its text form, used by the
command lines, is `name` or `name:key=value,key=value` (values parsed as JSON when they are
JSON, lists as tuples, else kept as strings; a list's own commas stay inside its brackets),
e.g. `dflash:path=experiments/zoo/dflash-b16,block_size=8`,
`oracle:tau=6.5,block_size=16`, `isd:stride=4`. A factory gets the target, the spec's options
as keyword arguments and a `BuildContext` (the prompts and generation length, which the oracle
needs to precompute its streams), and returns a `Proposer`, or None for plain decoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MethodSpec:
    """A method's registered name and its options (hashable: options are sorted pairs)."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, **options: Any) -> MethodSpec:
        return cls(name, tuple(sorted(options.items())))

    @classmethod
    def parse(cls, text: str) -> MethodSpec:
        """`name` or `name:key=value,...`; raises ValueError on a malformed item."""
        name, _, rest = text.partition(":")
        if not name:
            raise ValueError(f"method spec {text!r}: empty method name")
        options = {}
        for item in filter(None, _items(rest)):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise ValueError(f"method spec {text!r}: {item!r} is not key=value")
            try:
                options[key] = _frozen(json.loads(value))
            except json.JSONDecodeError:
                options[key] = value
        return cls.of(name, **options)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)

    def with_options(self, **options: Any) -> MethodSpec:
        return MethodSpec.of(self.name, **{**self.kwargs, **options})

    def asdict(self) -> dict[str, Any]:
        """JSON-ready record of the spec (nested specs as dicts)."""
        return {"name": self.name, **{k: v.asdict() if isinstance(v, MethodSpec) else v
                                      for k, v in self.options}}

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(
            f"{k}={json.dumps(v, separators=(',', ':')) if isinstance(v, tuple) else v}"
            for k, v in self.options)


def _items(text: str) -> list[str]:
    """`key=value` items split at the commas outside brackets (a JSON list value keeps
    its own commas)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return items + [text[start:]]


def _frozen(value: Any) -> Any:
    """JSON lists as tuples, so a spec stays hashable."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class BuildContext:
    """What a factory may need beyond the target: the prompts it will decode (token ids),
    the generation length, their greedy continuations when the driver already has them
    (`streams`; the oracle drafts them), and a drafter proposer the driver built once and
    shares between methods (`drafter`; the oracle runs it as its shadow with shadow=true)."""

    prompts: Sequence[Sequence[int]] = field(default_factory=tuple)
    max_new_tokens: int = 128
    streams: Sequence[Sequence[int]] | None = None
    drafter: Any = None


Factory = Callable[..., Any]
FACTORIES: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator: `factory(target, context, **options) -> Proposer | None` under `name`."""
    def add(factory: Factory) -> Factory:
        if name in FACTORIES:
            raise ValueError(f"method {name!r} is registered twice")
        FACTORIES[name] = factory
        return factory
    return add
