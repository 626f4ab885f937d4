"""The committed zoo is the one its manifest pins: every listed file's size and sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ZOO = Path(__file__).parents[2] / "experiments" / "zoo"


def test_every_zoo_file_matches_its_manifest():
    files = json.loads((ZOO / "manifest.json").read_text())["files"]
    assert files
    for name, entry in files.items():
        data = (ZOO / name).read_bytes()
        assert len(data) == entry["bytes"], name
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
