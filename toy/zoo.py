"""The zoo: the recipe's small models copied out of artifacts/ with a manifest.

    python -m toy.zoo --artifacts artifacts/toy --zoo experiments/zoo

Copies the tokenizer, the target and the drafters of a finished recipe run (every file of
those stage folders) into the zoo folder and writes `manifest.json`: per file its sha256 and
size; per stage the command and seed that produced it, its key (toy/recipe.py),
metrics and wall time. `verify_zoo` re-hashes the files against the manifest. The committed
zoo lives in experiments/zoo/ (the recipe's `--zoo` writes the same) and is kept under
25 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

ZOO_STAGES = ("tokenizer", "target", "dflash-b16", "dflash-b8", "eval")
MAX_BYTES = 25 * 2**20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def export_zoo(artifacts: Path, zoo: Path, stages=ZOO_STAGES, max_bytes: int = MAX_BYTES
               ) -> dict:
    """Copy `stages` of a recipe run into `zoo` and write its manifest; returns the manifest."""
    missing = [s for s in stages if not (artifacts / s / "stage.json").is_file()]
    if missing:
        raise FileNotFoundError(f"{artifacts}: stages {missing} are not done")
    files, records = {}, {}
    for stage in stages:
        records[stage] = json.loads((artifacts / stage / "stage.json").read_text())
        (zoo / stage).mkdir(parents=True, exist_ok=True)
        for src in sorted((artifacts / stage).iterdir()):
            if not src.is_file():
                continue
            dst = zoo / stage / src.name
            shutil.copy(src, dst)
            files[f"{stage}/{src.name}"] = {"sha256": sha256_file(dst),
                                            "bytes": dst.stat().st_size}
    total = sum(f["bytes"] for f in files.values())
    if total > max_bytes:
        raise ValueError(f"zoo would hold {total / 2**20:.1f} MB, over the "
                         f"{max_bytes / 2**20:.0f} MB cap")
    manifest = {"total_bytes": total, "files": files,
                "stages": {s: {k: r.get(k) for k in ("command", "seed", "key", "params",
                                                     "metrics", "wall_s")}
                           for s, r in records.items()}}
    (zoo / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def verify_zoo(zoo: Path) -> list[str]:
    """Files whose sha256 or presence disagrees with the manifest (empty: all good)."""
    manifest = json.loads((zoo / "manifest.json").read_text())
    bad = []
    for name, entry in manifest["files"].items():
        path = zoo / name
        if not path.is_file() or sha256_file(path) != entry["sha256"]:
            bad.append(name)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", type=Path, required=True)
    ap.add_argument("--zoo", type=Path, required=True)
    args = ap.parse_args()
    manifest = export_zoo(args.artifacts, args.zoo)
    print(f"zoo: {len(manifest['files'])} files, {manifest['total_bytes'] / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
