"""Every repository path a README names exists: README.md, benchmarks/README.md,
experiments/README.md and the README of every benchmark run and experiment folder.

A path is a run of path characters starting at a top-level folder of the project
(`benchmarks/...`, `experiments/...`, `conf/...`, a package, `tests/...`), or starting with
`../` (relative to the README's folder). A path cut short by a placeholder (`<model>`,
`{a,b}`, `*`) must be the prefix of an existing path.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
TOP = (
    "benchmarks",
    "experiments",
    "conf",
    "kernels",
    "reference",
    "simulator",
    "workbench",
    "common",
    "toy",
    "tests",
)
ROOTED = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP) + r")/[\w./-]*)([<{*]?)")
RELATIVE = re.compile(r"(?<![\w/.-])(\.\./[\w./-]*)([<{*]?)")


def readmes(root: Path = ROOT) -> list[Path]:
    """The READMEs whose paths are checked."""
    found = [
        root / "README.md",
        *sorted((root / "benchmarks").rglob("README.md")),
        *sorted((root / "experiments").rglob("README.md")),
    ]
    return [p for p in found if p.is_file()]


def _exists(path: Path, prefix: bool) -> bool:
    if prefix:
        return any(path.parent.glob(path.name + "*"))
    return path.exists()


def dead_paths(readme: Path, root: Path = ROOT) -> list[str]:
    """'README: path' for every named path that does not exist."""
    text = readme.read_text()
    bad = []
    for regex, base in ((ROOTED, root), (RELATIVE, readme.parent)):
        for m in regex.finditer(text):
            name = m.group(1).rstrip(".,:;")
            if not _exists(base / name, bool(m.group(2))):
                bad.append(f"{readme.relative_to(root)}: {name}")
    return bad


def test_every_path_a_readme_names_exists():
    bad = [b for readme in readmes() for b in dead_paths(readme)]
    assert bad == []


def test_the_index_lists_every_benchmark_run():
    """benchmarks/README.md has a row for every benchmarks/<topic>/<date>-<slug>/ folder."""
    index = (ROOT / "benchmarks" / "README.md").read_text()
    runs = [p for p in (ROOT / "benchmarks").glob("*/*/") if re.match(r"\d{4}-\d\d-\d\d-", p.name)]
    assert len(runs) > 20
    missing = [str(p.relative_to(ROOT)) for p in runs if f"`{p.relative_to(ROOT)}/`" not in index]
    assert missing == []
    assert all((p / "README.md").is_file() for p in runs)


def test_the_checker_sees_dead_rooted_relative_and_placeholder_paths(tmp_path):
    (tmp_path / "benchmarks" / "kernels" / "run").mkdir(parents=True)
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "toy.yaml").write_text("")
    readme = tmp_path / "benchmarks" / "kernels" / "run" / "README.md"
    readme.write_text(
        "See `benchmarks/kernels/run/`, conf/model/toy.yaml, conf/model/<name>.yaml,\n"
        "conf/model/gone.yaml, ../run/README.md and ../other/x.json.\n"
    )
    assert dead_paths(readme, tmp_path) == [
        "benchmarks/kernels/run/README.md: conf/model/gone.yaml",
        "benchmarks/kernels/run/README.md: ../other/x.json",
    ]
