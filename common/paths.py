"""Where the Hydra config tree lives: the repository's top-level conf/, or its installed copy.

A source checkout (and an editable install of it) reads conf/ next to the packages; a wheel
ships the same files inside the `workbench` package as `workbench/conf/` (setup.py maps the
package `workbench.conf` to conf/). The copy that belongs to the imported code wins, so a
checkout never reads another installation's configs, and an installed copy never reads a
stray conf/ folder of the current directory. Stdlib only: the GPU machine, which has neither
hydra nor omegaconf, reads conf/acceptance and conf/hardware through it too.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = (ROOT / "workbench" / "conf", ROOT / "conf")  # installed wheel, then checkout


def conf_dir() -> Path:
    """The folder holding config.yaml and the groups (model/, hardware/, calibration/, ...)."""
    for path in CANDIDATES:
        if (path / "config.yaml").is_file():
            return path
    raise FileNotFoundError(
        f"no config.yaml in {' or '.join(map(str, CANDIDATES))}: the "
        "package was installed without its configs"
    )
