"""The mutation catalog stays applicable: every fragment occurs exactly once in the file it
names and every test path it names exists, so a refactor cannot turn a mutation into a
silent skip (tests/mutation/runner.py skips a mutation whose fragment is gone)."""

from __future__ import annotations

from pathlib import Path

from tests.mutation.runner import check_fragments, load

ROOT = Path(__file__).parents[1]


def test_every_fragment_applies_to_this_tree():
    assert check_fragments(ROOT, load()) == {}


def test_every_named_test_file_exists():
    missing = {m.name: t for m in load() for t in m.tests
               if not (ROOT / t.split("::")[0]).is_file()}
    assert missing == {}
