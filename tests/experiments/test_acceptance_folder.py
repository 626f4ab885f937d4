"""experiments.acceptance reads the recipe folder, else the committed zoo, else says in one
line that neither holds a target (an installed copy, run outside the checkout)."""

from __future__ import annotations

import pytest

from experiments.acceptance import DEFAULT_ARTIFACTS, ZOO, artifacts_folder


def test_the_zoo_stands_in_for_an_empty_default_folder(tmp_path, monkeypatch):
    (tmp_path / ZOO / "target").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert artifacts_folder(DEFAULT_ARTIFACTS) == ZOO
    assert artifacts_folder("elsewhere") == "elsewhere"


def test_no_target_anywhere_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="neither .* holds a target") as e:
        artifacts_folder(DEFAULT_ARTIFACTS)
    assert "\n" not in str(e.value)
