"""Every repository path a README names exists: README.md, docs/README.md,
benchmarks/README.md, experiments/README.md and the README of every benchmark run and
experiment folder. Every citation of a document resolves inside the repository: a
`docs/<file>.md` named anywhere exists, and the sections it cites (`section 4.2`,
`sections 2.1 and 4.3`, `sections 1-3`, a bare `5.1`, or a quoted heading `, "Hot path"`)
are headings of that file; no file cites a document outside the repository.

A path is a run of path characters starting at a top-level folder of the project
(`benchmarks/...`, `experiments/...`, `conf/...`, a package, `tests/...`), or starting with
`../` (relative to the README's folder). A path cut short by a placeholder (`<model>`,
`{a,b}`, `*`) must be the prefix of an existing path.
"""

from __future__ import annotations

import re
import subprocess
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
    "docs",
)
ROOTED = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP) + r")/[\w./-]*)([<{*]?)")
RELATIVE = re.compile(r"(?<![\w/.-])(\.\./[\w./-]*)([<{*]?)")


def readmes(root: Path = ROOT) -> list[Path]:
    """The READMEs whose paths are checked."""
    found = [
        root / "README.md",
        root / "docs" / "README.md",
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


NUMBER = r"\d+(?:\.\d+)*"
CITATION = re.compile(
    r"(?<![\w/.-])docs/([\w-]+\.md)"
    r"(?:,?\s+(?:sections?\s+)?(" + NUMBER + r"(?:(?:\s*,\s*|,?\s+and\s+|-)" + NUMBER + r")*)"
    r"|,\s+\"([^\"]+)\")?"
)
# a path up out of the repository, or into the design and research notes kept beside it
OUTSIDE = re.compile(r"[.][.][/]shared[/]|(?<![\w-])shared[/](?:research|design)[/]")
HEADING = re.compile(r"^#+\s+(?:(" + NUMBER + r")\.?\s+)?(.*?)\s*$", re.M)


def headings(doc: Path) -> tuple[set[str], list[str]]:
    """The numbers and the titles (number stripped) of a Markdown file's headings."""
    found = HEADING.findall(doc.read_text())
    return {n for n, _ in found if n}, [title.lower() for _, title in found]


def _cited_numbers(text: str) -> list[str]:
    """'1-3' -> 1, 2, 3; '2.1 and 4.3' -> 2.1, 4.3; a dotted range keeps its two ends."""
    out = []
    for part in re.split(r"\s*,\s*|,?\s+and\s+", text):
        lo, _, hi = part.partition("-")
        if hi and lo.isdigit() and hi.isdigit():
            out += [str(n) for n in range(int(lo), int(hi) + 1)]
        else:
            out += [lo] + ([hi] if hi else [])
    return out


def bad_citations(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """'file: citation (why)' for every docs citation that does not resolve and every
    citation of a document outside the repository."""
    name = path.relative_to(root) if path.is_absolute() else path
    bad = [f"{name}: {m.group(0)} (outside the repository)" for m in OUTSIDE.finditer(text)]
    for m in CITATION.finditer(text):
        doc = root / "docs" / m.group(1)
        if not doc.is_file():
            bad.append(f"{name}: {m.group(0)} (no such file)")
            continue
        numbers, titles = headings(doc)
        missing = [n for n in _cited_numbers(m.group(2)) if n not in numbers] if m.group(2) else []
        if m.group(3) and not any(t.startswith(m.group(3).lower()) for t in titles):
            missing.append(f'"{m.group(3)}"')
        bad += [f"{name}: {m.group(0)} (no heading {x})" for x in missing]
    return bad


def _text_files(root: Path = ROOT) -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                         check=True).stdout.split()
    files = [root / f for f in out if (root / f).is_file() and (root / f).stat().st_size < 2**20]
    return [f for f in files if b"\0" not in f.read_bytes()[:4096]]


def test_every_docs_citation_resolves_inside_the_repository():
    files = [f for f in _text_files() if f != Path(__file__)]  # this file's citations are fixtures
    assert len(files) > 200
    cited = [f for f in files if CITATION.search(f.read_text(errors="replace"))]
    assert len(cited) > 30
    bad = [b for f in files for b in bad_citations(f, f.read_text(errors="replace"))]
    assert bad == []


def test_the_citation_checker_sees_missing_files_sections_headings_and_outside_paths(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "note.md").write_text(
        "# Note\n\n## 1. One\n\n### 1.2 Sub\n\n## 2. Two\n\n## Hot path of a round\n")
    up, beside = "../" + "shared" + "/", "shared" + "/research/"  # in pieces: cites neither
    text = (
        "docs/note.md section 1.2, docs/note.md sections 1-2, docs/note.md 1.2 and 2,\n"
        'docs/note.md, "Hot path", docs/note.md sections 1.2, 3.1 and 2, docs/note.md 1-3,\n'
        f'docs/gone.md 1, docs/note.md, "Cold path", {up}x.md, {beside}y.md 4.\n'
    )
    assert bad_citations(Path("a.py"), text, tmp_path) == [
        f"a.py: {up} (outside the repository)",
        f"a.py: {beside} (outside the repository)",
        "a.py: docs/note.md sections 1.2, 3.1 and 2 (no heading 3.1)",
        "a.py: docs/note.md 1-3 (no heading 3)",
        "a.py: docs/gone.md 1 (no such file)",
        'a.py: docs/note.md, "Cold path" (no heading "Cold path")',
    ]
