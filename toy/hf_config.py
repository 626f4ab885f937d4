"""HF checkpoints whose config.json loads in transformers 4.5x as well as 5.x.

transformers 5 saves the rotary base only inside `rope_parameters` ({"rope_type",
"rope_theta"}); 4.5x reads a top-level `rope_theta` and, without one, silently falls back to
10000, a wrong rotary base for any other value. `save_pretrained` writes a model as
transformers does, then adds the top-level field next to `rope_parameters`, so both
versions (and z-lab's drafter loader, pinned to 4.5x) read the same base. Drafter configs
(toy/draft_model.py) write `rope_theta` at the top level themselves.
"""

from __future__ import annotations

import json
from pathlib import Path


def add_top_level_rope_theta(config: dict) -> dict:
    """`config` with `rope_theta` copied to the top level from `rope_parameters` (unchanged
    when it is there already or the config has no rope_parameters)."""
    theta = (config.get("rope_parameters") or {}).get("rope_theta")
    if theta is None or "rope_theta" in config:
        return config
    return {**config, "rope_theta": theta}


def save_pretrained(model, out: Path) -> None:
    """`model.save_pretrained(out)` (safetensors) with a config.json both versions read."""
    model.save_pretrained(out, safe_serialization=True)
    path = Path(out) / "config.json"
    config = add_top_level_rope_theta(json.loads(path.read_text()))
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
