"""Where the Hydra config tree lives: the repository's top-level conf/, or its installed copy.

A source checkout (and an editable install of it) reads conf/ next to the packages; a wheel
ships the same files inside the `workbench` package as `workbench/conf/` (setup.py maps the
package `workbench.conf` to conf/). The copy that belongs to the imported code wins, so a
checkout never reads another installation's configs, and an installed copy never reads a
stray conf/ folder of the current directory. Commands that write into the tree by default
(calibrate, validate report, reproduce) write into the current directory instead when
installed (`tree_output`). Stdlib only: the GPU machine, which has neither
hydra nor omegaconf, reads conf/acceptance and conf/hardware through it too.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = (ROOT / "workbench" / "conf", ROOT / "conf")  # installed wheel, then checkout


def is_checkout() -> bool:
    """Whether the imported code is a source checkout (an editable install included), whose
    tree a command may write into; an installed wheel's is the site's, never written."""
    return (ROOT / "pyproject.toml").is_file() and (ROOT / "conf" / "config.yaml").is_file()


def tree_output(default: Path, flag: str) -> Path:
    """`default` (a folder inside the repository) in a checkout; in an installed copy the
    folder of the same relative path under the current directory, since the installed
    package is never written (`flag` names the option that picks another folder)."""
    if is_checkout():
        return default
    rel = default.resolve().relative_to(ROOT) if default.resolve().is_relative_to(ROOT) \
        else Path(default.name)
    if rel.parts[:2] == ("workbench", "conf"):
        rel = Path("conf", *rel.parts[2:])
    print(f"writing to ./{rel.as_posix()} ({flag} picks another folder; the installed "
          "package is never written)")
    return Path.cwd() / rel


def conf_dir() -> Path:
    """The folder holding config.yaml and the groups (model/, hardware/, calibration/, ...)."""
    for path in CANDIDATES:
        if (path / "config.yaml").is_file():
            return path
    raise FileNotFoundError(
        f"no config.yaml in {' or '.join(map(str, CANDIDATES))}: the "
        "package was installed without its configs"
    )
