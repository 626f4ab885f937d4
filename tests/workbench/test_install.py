"""The install tiers and the package: the simulator's commands run without the engine's
libraries, a wheel carries conf/ and the console script, and an installed (non-editable)
copy simulates from any directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE = ("torch", "triton", "transformers", "safetensors", "tokenizers")
PACKAGES = ("common", "workbench", "reference", "kernels", "simulator", "toy", "experiments")
# a meta-path finder that makes the engine's libraries absent, as in a core install
BLOCK = (
    "import sys\n"
    "class Absent:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {ENGINE!r}:\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, Absent())\n"
)


def _python(code: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_simulate_and_help_run_without_the_engine_libraries(tmp_path):
    code = BLOCK + (
        "from workbench.__main__ import main\n"
        "assert main(['--help']) == 0\n"
        f"rc = main(['simulate', 'experiment=smoke', 'hydra.run.dir={tmp_path}'])\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {ENGINE!r}]\n"
        "assert rc == 0 and not bad, (rc, bad)\n"
    )
    proc = _python(code, REPO)
    assert proc.returncode == 0, proc.stderr
    assert "simulate" in proc.stdout and "dflash B=16" in proc.stdout
    assert len(json.loads((tmp_path / "summary.json").read_text())["runs"]) == 4


def test_the_blocker_blocks():
    """The finder above really hides the engine: importing torch behind it fails."""
    proc = _python(BLOCK + "import torch\n", REPO)
    assert proc.returncode != 0 and "No module named 'torch'" in proc.stderr


def test_an_engine_command_without_the_engine_names_the_extra():
    code = BLOCK + (
        "from workbench.__main__ import main\nraise SystemExit(main(['kernels-check']))\n"
    )
    proc = _python(code, REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "kernels-check needs torch: pip install 'dflash-workbench[engine]' (the README says "
        "how to get the CPU-only torch)"
    ]


def _isolation_flags() -> list[str]:
    """Build with this environment's setuptools when it builds wheels itself (>= 70.1, as
    pyproject's >= 68 plus the wheel command); else let pip fetch a build environment."""
    try:
        major, minor = (int(x) for x in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if (major, minor) >= (70, 1) else []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the sources (no build/ left in the tree)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    heavy = shutil.ignore_patterns("__pycache__", "*.safetensors", "*.png", "*.csv", "*.jsonl")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in (*PACKAGES, "conf"):
        shutil.copytree(REPO / name, src / name, ignore=heavy)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", *_isolation_flags(), "-q"]
    proc = subprocess.run(
        [*cmd, "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return next((tmp_path / "dist").glob("*.whl"))


def test_the_wheel_ships_conf_the_experiments_and_the_console_script(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    conf = {
        f"workbench/conf/{p.relative_to(REPO / 'conf')}"
        for p in (REPO / "conf").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert conf and conf <= names, sorted(conf - names)
    assert {
        "workbench/conf/calibration/h200/qwen3-8b.json",
        "experiments/acceptance.py",
        "experiments/__init__.py",
        "simulator/__init__.py",
    } <= names
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "workbench = workbench.__main__:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_wheel_installs_exactly_the_projects_packages_and_the_commands_data(wheel):
    """Top-level packages: the seven of setup.py, nothing else (no tests/, benchmarks/,
    build/); every module of the six whole packages; the committed data that reproduce reads
    (experiments/published/*.json) and the build commit that stamps results."""
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    tops = {n.split("/")[0] for n in names} - {info}
    assert tops == set(PACKAGES), sorted(tops ^ set(PACKAGES))
    assert set(archive.read(f"{info}/top_level.txt").decode().split()) == set(PACKAGES)
    modules = {
        p.relative_to(REPO).as_posix()
        for name in PACKAGES if name != "experiments"
        for p in (REPO / name).rglob("*.py") if "__pycache__" not in p.parts
    }
    assert modules and modules <= names, sorted(modules - names)[:5]
    published = {
        f"experiments/published/{p.name}" for p in (REPO / "experiments/published").glob("*")
        if p.suffix in (".json", ".py")
    }
    assert {"experiments/published/cells.json", "experiments/published/protocol.json"} <= published
    assert published <= names, sorted(published - names)
    assert "common/build_commit.txt" in names


def test_a_non_editable_install_simulates_from_another_directory(tmp_path, wheel):
    target = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    proc = subprocess.run([*cmd, str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = BLOCK + (
        "import workbench, common.paths, experiments.spec_v2\n"
        f"assert workbench.__file__.startswith({str(target)!r}), workbench.__file__\n"
        f"assert common.paths.conf_dir() == common.paths.Path({str(target)!r}) / 'workbench'"
        " / 'conf'\n"
        "from workbench.__main__ import main\n"
        "raise SystemExit(main(['simulate', 'experiment=smoke', 'model=qwen3-8b',"
        " 'engine.cost_model=calibrated', 'hydra.run.dir=out']))\n"
    )
    proc = _python(code, elsewhere, {**os.environ, "PYTHONPATH": str(target)})
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((elsewhere / "out" / "summary.json").read_text())["runs"]
    assert {r["cost_model"] for r in runs} == {"calibrated h200/qwen3-8b"}


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2 and "torch" not in block[0] and "workbench simulate" in block[0]
    assert (REPO / ".ci" / "run").read_text().strip().splitlines()[-1] == block[1]
