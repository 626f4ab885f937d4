"""Folders by role: test fixtures live in tests/data/, and the code under benchmarks/ is either
a probe kept next to its results (a dated run folder) or one of the suite scripts the
benchmarks/README.md names (its rule: probe code is data, read and re-run at its commit).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
SUITE = {"benchmarks/reference/ab_report.py"}
DATED = re.compile(r"^benchmarks/[\w-]+/\d{4}-\d\d-\d\d-[\w.-]+/")


def _tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *paths], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return out.split()


def misplaced_fixtures(files: list[str]) -> list[str]:
    """Files under tests/ that are not Python and not under tests/data/."""
    return [f for f in files if not f.endswith(".py") and not f.startswith("tests/data/")]


def undated_probes(files: list[str]) -> list[str]:
    """Python files under benchmarks/ outside a dated run folder and not a named suite tool."""
    return [f for f in files if f.endswith(".py") and not DATED.match(f) and f not in SUITE]


def test_fixtures_live_in_tests_data():
    assert misplaced_fixtures(_tracked("tests")) == []
    assert (ROOT / "tests" / "data" / "method_pins.json").is_file()


def test_benchmark_code_is_a_dated_probe_or_a_suite_tool():
    files = _tracked("benchmarks")
    assert [f for f in files if f.endswith(".py")]
    assert undated_probes(files) == []
    index = (ROOT / "benchmarks" / "README.md").read_text()
    assert all(f"`{f}`" in index for f in SUITE)


def test_the_checkers_see_a_stray_fixture_and_a_stray_probe():
    assert misplaced_fixtures(["tests/a.py", "tests/data/x.json", "tests/reference/y.json"]) == [
        "tests/reference/y.json"]
    assert undated_probes(["benchmarks/kernels/2026-12-02-pdl-probe/probe.py",
                           "benchmarks/kernels/probe.py", "benchmarks/reference/ab_report.py",
                           "benchmarks/kernels/2026-12-02-pdl-probe/README.md"]) == [
        "benchmarks/kernels/probe.py"]
