"""Apply catalogued mutations to a copy of the tree and run their tests.

The catalog (catalog.py) is data, one dict per mutation:

- `name`: unique id; `file`: path from the repository root;
- `original`: an exact fragment of that file (it must occur exactly once; it may span
  lines), `replacement`: what it becomes;
- `tests`: pytest paths (files or node ids) that should catch it; paths missing from the tree
  under test (e.g. a revision before they were written) are left out;
- `gpu_only`: true when only a CUDA run can see the bug (memory ordering, cuBLAS branches):
  skipped without a GPU, run by `--gpu` on one;
- `why`: what the bug is, in a line.

Each mutation is applied to a copy of the tree (the working tree's tracked and unignored
files, or `git archive REV`), its tests run with `python -m pytest -x -q -p no:cacheprovider`,
no bytecode cache (a mutated file never meets a stale .pyc) and no shrinking of a failing
hypothesis example (HYPOTHESIS_NO_SHRINK: one failure is enough), then the file is restored.
Outcomes: killed (tests failed), timeout (counted as killed), survived (tests passed),
skipped (gpu_only without CUDA, or no fragment or tests in that tree), error (pytest could
not run the tests: a usage or collection problem of the unmutated tree).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]
KILLED = ("killed", "timeout")


@dataclass(frozen=True)
class Mutation:
    """One catalogued bug (see the module docstring for the fields)."""

    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    why: str
    gpu_only: bool = False


@dataclass
class Outcome:
    """What running one mutation's tests gave."""

    name: str
    file: str
    status: str
    seconds: float
    gpu_only: bool
    why: str
    tests: list[str] = field(default_factory=list)
    failed: str = ""  # the first failing test, when killed


def load(raw: list[dict] | None = None) -> list[Mutation]:
    """The catalog (default: catalog.MUTATIONS), checked: unique names, tests, a change."""
    from tests.mutation.catalog import MUTATIONS

    out = [
        Mutation(
            m["name"],
            m["file"],
            m["original"],
            m["replacement"],
            tuple(m["tests"]),
            m["why"],
            bool(m.get("gpu_only", False)),
        )
        for m in raw or MUTATIONS
    ]
    names = [m.name for m in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"mutation names must be unique: {sorted(dup)}")
    for m in out:
        if not m.tests or m.original == m.replacement:
            raise ValueError(f"mutation {m.name}: needs tests and a replacement that differs")
    return out


def copy_tree(dest: Path, rev: str | None = None) -> None:
    """The tree under test in `dest`: `git archive rev`, or the working tree's tracked and
    unignored files (every file but caches where there is no git checkout)."""
    if rev is not None:
        archive = subprocess.run(
            ["git", "archive", rev], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    try:
        files = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(
            ROOT,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(
                ".git", "__pycache__", ".hypothesis", ".pytest_cache", "outputs", "artifacts"
            ),
        )
        return
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def check_fragments(tree: Path, mutations: list[Mutation]) -> dict[str, str]:
    """Reasons a mutation cannot apply to `tree` (name -> reason); applicable ones absent."""
    bad = {}
    for m in mutations:
        path = tree / m.file
        if not path.is_file():
            bad[m.name] = f"no file {m.file}"
            continue
        count = path.read_text().count(m.original)
        if count != 1:
            bad[m.name] = f"fragment found {count} times in {m.file}"
    return bad


def _pytest(tree: Path, tests: list[str], timeout_s: float, profile: str) -> tuple[str, float, str]:
    """(status, seconds, first failing test) of `pytest -x -q tests` in `tree`."""
    env = {
        **os.environ,
        "HYPOTHESIS_PROFILE": profile,
        "HYPOTHESIS_NO_SHRINK": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, ""
    seconds = time.perf_counter() - start
    if proc.returncode == 0:
        return "survived", seconds, ""
    if proc.returncode == 1:
        failed = re.search(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.MULTILINE)
        return "killed", seconds, failed.group(1) if failed else ""
    return "error", seconds, (proc.stdout + proc.stderr)[-400:]


def run(
    mutations: list[Mutation],
    *,
    rev: str | None = None,
    timeout_s: float = 600.0,
    profile: str = "ci",
    gpu: bool = False,
    baseline: bool = True,
    log=print,
) -> list[Outcome]:
    """Run every mutation (gpu_only ones only with `gpu`, the others only without it)."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        tree = Path(tmp)
        copy_tree(tree, rev)
        bad = check_fragments(tree, mutations)
        if baseline:  # the union of the tests, once, on the unmutated tree
            union = sorted(
                {
                    t
                    for m in mutations
                    if m.name not in bad and m.gpu_only == gpu
                    for t in _present(tree, m)
                }
            )
            status, seconds, detail = _pytest(tree, union, 4 * timeout_s, profile)
            log(f"baseline ({len(union)} test paths): {status} in {seconds:.0f} s {detail}")
            if status != "survived":
                raise RuntimeError(f"the unmutated tree fails its tests: {detail}")
        for m in mutations:
            tests = _present(tree, m)
            if m.gpu_only != gpu or m.name in bad or not tests:
                why = (
                    ("gpu only" if m.gpu_only else "cpu")
                    if m.gpu_only != gpu
                    else (bad.get(m.name) or "no tests in this tree")
                )
                outcomes.append(
                    Outcome(m.name, m.file, "skipped", 0.0, m.gpu_only, f"{m.why} [{why}]", tests)
                )
                continue
            path = tree / m.file
            source = path.read_text()
            path.write_text(source.replace(m.original, m.replacement))
            try:
                status, seconds, failed = _pytest(tree, tests, timeout_s, profile)
            finally:
                path.write_text(source)
            outcomes.append(
                Outcome(m.name, m.file, status, seconds, m.gpu_only, m.why, tests, failed)
            )
            log(f"{m.name}: {status} in {seconds:.0f} s {failed}")
    return outcomes


def _present(tree: Path, m: Mutation) -> list[str]:
    return [t for t in m.tests if (tree / t.split("::")[0]).exists()]


def summary(outcomes: list[Outcome]) -> dict:
    """Counts and the kill rate over the mutations that ran."""
    ran = [o for o in outcomes if o.status in (*KILLED, "survived")]
    killed = sum(o.status in KILLED for o in ran)
    return {
        "ran": len(ran),
        "killed": killed,
        "survived": [o.name for o in ran if o.status == "survived"],
        "skipped": [o.name for o in outcomes if o.status == "skipped"],
        "errors": [o.name for o in outcomes if o.status == "error"],
        "kill_rate": killed / len(ran) if ran else None,
    }


def write_report(outcomes: list[Outcome], out: Path, header: dict) -> None:
    """results.json (header, summary, every outcome) and results.md (a table) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    s = summary(outcomes)
    doc = {**header, "summary": s, "outcomes": [asdict(o) for o in outcomes]}
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    rate = "n/a" if s["kill_rate"] is None else f"{100 * s['kill_rate']:.0f}%"
    lines = [
        f"# Mutation run: {s['killed']} of {s['ran']} killed ({rate})",
        "",
        f"command: `{header['command']}`",
        "",
        "| mutation | file | status | s | first failing test |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {o.name} | {o.file} | {o.status} | {o.seconds:.0f} | "
        f"{' '.join(o.failed.split()).replace('|', '/')[:120]} |"
        for o in outcomes
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n")
