"""Record the grids a Triton kernel is launched with (which path a call took)."""

from __future__ import annotations


def record_launches(monkeypatch, module, name: str) -> list[tuple]:
    """Replace `module.name` (a Triton kernel) for the test by a spy that appends each launch
    grid to the returned list and launches the real kernel."""
    launched: list[tuple] = []
    real = getattr(module, name)

    class Spy:
        def __getitem__(self, grid):
            launched.append(grid)
            return real[grid]

    monkeypatch.setattr(module, name, Spy())
    return launched
