"""What goes into the wheel: the project's packages, and conf/ shipped as `workbench/conf`.

Metadata, dependencies, extras and the console script live in pyproject.toml. The package
list lives here because the Hydra configs stay at the repository's top level (conf/) yet
must travel inside the package for a non-editable install, and a mapped package
(`workbench.conf` -> conf/) cannot be found by pyproject's `packages.find`;
common/paths.py resolves the folder at run time.
"""

from setuptools import find_namespace_packages, setup

PACKAGES = ["common*", "workbench*", "reference*", "kernels*", "simulator*", "toy*", "experiments",
            "experiments.published"]
# conf/ and its groups as packages of data files (setuptools wants every folder named)
CONF = ["workbench.conf", *(f"workbench.conf.{p}" for p in find_namespace_packages("conf"))]

setup(
    packages=[*find_namespace_packages(include=PACKAGES), *CONF],
    package_dir={"workbench.conf": "conf"},
    package_data={p: ["*.yaml", "*.json", "*.md"] for p in CONF},
)
