"""What goes into the wheel: the project's packages, and conf/ shipped as `workbench/conf`.

Metadata, dependencies, extras and the console script live in pyproject.toml. The package
list lives here because the Hydra configs stay at the repository's top level (conf/) yet
must travel inside the package for a non-editable install, and a mapped package
(`workbench.conf` -> conf/) cannot be found by pyproject's `packages.find`;
common/paths.py resolves the folder at run time.
"""

import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

PACKAGES = ["common*", "workbench*", "reference*", "kernels*", "simulator*", "toy*", "experiments",
            "experiments.published"]
# conf/ and its groups as packages of data files (setuptools wants every folder named)
CONF = ["workbench.conf", *(f"workbench.conf.{p}" for p in find_namespace_packages("conf"))]



class BuildWithCommit(build_py):
    """Also writes common/build_commit.txt: the commit the wheel is built from, which
    common/stamps.py records in every result of an installed copy (empty outside git)."""

    def run(self) -> None:
        super().run()
        try:
            sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                 cwd=Path(__file__).parent, timeout=10).stdout.strip()
        except OSError:
            sha = ""
        out = Path(self.build_lib) / "common" / "build_commit.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(sha + "\n")


setup(
    cmdclass={"build_py": BuildWithCommit},
    packages=[*find_namespace_packages(include=PACKAGES), *CONF],
    package_dir={"workbench.conf": "conf"},
    # conf/, and the committed data the commands read (reproduce: the published cells)
    package_data={**{p: ["*.yaml", "*.json", "*.md"] for p in CONF},
                  "experiments.published": ["*.json"]},
)
