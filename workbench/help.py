"""`workbench simulate --help`: every config field with its value, range and description.

conf/config.yaml's `hydra.help.template` calls the resolver `${simulate_fields:}`, which
reads the composed config (so `simulate spec=eagle_tree --help` shows that option's values
and its method's own `spec.options`) beside the schemas: the section dataclasses of
`SimulateConfig` (workbench/config.py, simulator/params.py), each section's docstring and
each field's `param(..., doc=...)` metadata (simulator/fields.py). One line per field:

    spec.block_size = 16  [1, 256]  B: tokens verified per request per round ...
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

from omegaconf import DictConfig, OmegaConf

from simulator.methods import METHODS
from workbench.config import SimulateConfig

WIDTH = 100


def _value(v: Any) -> str:
    """A value as an override writes it (null, true, [1, 2], 3e-05, qwen3-8b)."""
    if OmegaConf.is_config(v):
        v = OmegaConf.to_container(v, resolve=True)
    return v if isinstance(v, str) else json.dumps(v)


def _accepted(meta: dict) -> str:
    """The field's range ("[1, 256]", ">= 0") or choices ("one of sync, overlap"); "" if any."""
    lo, hi, choices = meta.get("lo"), meta.get("hi"), meta.get("choices")
    if choices is not None:
        return "one of " + ", ".join(_value(c) for c in choices)
    if lo is None and hi is None:
        return ""
    return f"[{lo}, {hi}]" if hi is not None else f">= {lo}"


def _line(key: str, value: Any, meta: dict) -> str:
    parts = [f"{key} = {_value(value)}", _accepted(meta), meta.get("doc", "")]
    return textwrap.fill("  ".join(p for p in parts if p), WIDTH, initial_indent="  ",
                         subsequent_indent="      ")


def _summary(cls: type) -> str:
    """The first sentence of a dataclass's docstring."""
    text = " ".join((cls.__doc__ or "").split())
    return text.split(". ")[0].rstrip(".")


def _section(name: str, schema: Any, values: Any) -> list[str]:
    """The section's summary, then its fields (spec.options: the chosen method's options)."""
    lines = [textwrap.fill(f"{name}: {_summary(type(schema))}", WIDTH,
                           subsequent_indent="    ")]
    for f in dataclasses.fields(schema):
        if (name, f.name) == ("spec", "options"):
            lines += _options(values)
            continue
        lines.append(_line(f"{name}.{f.name}", _get(values, f.name, getattr(schema, f.name)),
                           dict(f.metadata)))
    return lines


def _get(values: Any, key: str, default: Any) -> Any:
    return values.get(key, default) if isinstance(values, (dict, DictConfig)) else default


def _options(spec: Any) -> list[str]:
    """The chosen method's own options (`spec.options.<key>`), or a line saying it has none."""
    method = METHODS.get(_get(spec, "method", "dflash"))
    if method is None:
        return []
    chosen = _get(spec, "options", {})
    fields = dataclasses.fields(method.options_class)
    if not fields:
        return [f"  (spec.method = {method.name} has no options of its own)"]
    return [_line(f"spec.options.{f.name}", _get(chosen, f.name, f.default), dict(f.metadata))
            for f in fields]


def field_lines(root: Any = None) -> list[str]:
    """Every field of `SimulateConfig` with its value in `root` (a composed config, a dict;
    None: the schema's defaults), its accepted range or choices and its description."""
    schema, top = SimulateConfig(), []
    lines: list[str] = []
    for f in dataclasses.fields(schema):
        value = getattr(schema, f.name)
        if dataclasses.is_dataclass(value):
            lines += ["", *_section(f.name, value, _get(root, f.name, None))]
        else:
            top.append(_line(f.name, _get(root, f.name, value), dict(f.metadata)))
    return ["top level:", *top, *lines]


def simulate_fields(*, _root_: DictConfig) -> str:
    """The resolver: `field_lines` of the composed config, '$' doubled for Hydra's template."""
    return "\n".join(field_lines(_root_)).replace("$", "$$")


OmegaConf.register_new_resolver("simulate_fields", simulate_fields, replace=True)
