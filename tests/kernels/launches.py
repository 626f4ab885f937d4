"""Record the launches of a Triton kernel (which path a call took, with which constexprs)."""

from __future__ import annotations


def record_launches(monkeypatch, module, name: str, *, with_kwargs: bool = False,
                    run: bool = True) -> list:
    """Replace `module.name` (a Triton kernel) for the test by a spy that appends each launch
    grid (with_kwargs: each (grid, launch keyword arguments) pair) to the returned list and
    launches the real kernel; run=False skips the launch (a test of the launch choices, not
    of the outputs)."""
    launched: list = []
    real = getattr(module, name)

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                launched.append((grid, kw) if with_kwargs else grid)
                return real[grid](*args, **kw) if run else None
            return launch

    monkeypatch.setattr(module, name, Spy())
    return launched
