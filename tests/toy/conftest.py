"""One micro recipe run (toy/recipe.py MICRO, CPU, ~25 s) shared by the toy tests."""

from __future__ import annotations

import pytest

from toy.recipe import MICRO, run_recipe


@pytest.fixture(scope="session")
def micro(tmp_path_factory):
    """(artifacts folder, records of the stages run) of the micro recipe."""
    out = tmp_path_factory.mktemp("toy")
    records = run_recipe(out, MICRO, command="test")
    return out, records
