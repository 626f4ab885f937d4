"""Run folders of `simulate`: one fresh folder per run, never a finished run's folder.

- `${unique_dir:PATH}` (a resolver, used by conf/config.yaml's hydra.run.dir and
  hydra.sweep.dir) creates PATH and returns it, or PATH-2, PATH-3, ... when PATH exists:
  the folder is made with mkdir, which fails when another process made it first, so two
  runs started in the same second get two folders. The answer is kept for the process and
  in the config's resolver cache, so every later read (Hydra's, a joblib job's) agrees.
- `FreshRunDir`, a Hydra callback (conf/config.yaml's hydra.callbacks), refuses a run whose
  folder already holds a run (a summary.json or Hydra's .hydra/ of an earlier run; for a
  multirun, its multirun.yaml), before Hydra writes anything into it, in one line on stderr
  and exit status 2 (a SystemExit: Hydra turns a callback's Exception into a warning).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

_MADE: dict[str, str] = {}
MARKERS = ("summary.json", ".hydra")


class RunFolderTaken(SystemExit):
    """The run's folder holds an earlier run's results: exits with status 2, after printing
    the message as one line on stderr."""

    def __init__(self, message: str):
        print(f"run folder error: {message}", file=sys.stderr)
        super().__init__(2)


def unique_dir(path: str) -> str:
    """`path`, or the first free `path-N` (N = 2, 3, ...), created empty by this call."""
    if path in _MADE:
        return _MADE[path]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        candidate = path if n == 1 else f"{path}-{n}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        _MADE[path] = candidate
        return candidate
    raise RunFolderTaken(f"{path}: 9999 run folders of that name exist")


OmegaConf.register_new_resolver("unique_dir", unique_dir, use_cache=True, replace=True)


def _taken(folder: Path, markers: tuple[str, ...]) -> str | None:
    return next((m for m in markers if (folder / m).exists()), None)


class FreshRunDir(Callback):
    """Refuses a run (or multirun) whose output folder already holds one."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        folder = Path(str(config.hydra.run.dir))
        marker = _taken(folder, MARKERS)
        if marker:
            raise RunFolderTaken(
                f"hydra.run.dir = {folder} already holds a run ({marker}); nothing was "
                "written: pick a new folder, or leave hydra.run.dir out for a fresh one")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        folder = Path(str(config.hydra.sweep.dir))
        if _taken(folder, ("multirun.yaml",)):
            raise RunFolderTaken(
                f"hydra.sweep.dir = {folder} already holds a multirun (multirun.yaml); "
                "nothing was written: pick a new folder, or leave hydra.sweep.dir out")
