"""The provenance stamp of a result: code version, library versions, GPU, UTC date.

The code version is the project's own: its package version and the commit of this checkout
(only when this checkout is itself the top of a git work tree, so an installed copy inside a
user's repository never records the user's commit), else the commit a wheel was built from
(setup.py writes it to common/build_commit.txt), else $GIT_SHA, else None.

`stamp(**extra)` is what every bench and driver writes next to its numbers, so a number can
be traced to the code and libraries that produced it. It holds no hostname and no absolute
path. Versions come from the installed distributions' metadata, so stamping never imports
torch; the GPU name and CUDA version are read only when the caller has already imported
torch (GPU jobs have; the simulator never does). Engine options go in as
`stamp(options=opts.asdict())`, like any other extra field.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DIST = "dflash-workbench"
BUILD_COMMIT = Path(__file__).resolve().parent / "build_commit.txt"
PACKAGES = ("numpy", "torch", "triton", "transformers", "simpy", "hydra-core")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _own_checkout() -> bool:
    """Whether REPO is the top of a git work tree (not a folder inside someone else's)."""
    top = _git("rev-parse", "--show-toplevel")
    return top is not None and Path(top).resolve() == REPO


def git_sha() -> str | None:
    """$GIT_SHA when set (a copied tree without .git), else HEAD of this checkout, else the
    commit the installed wheel was built from, or None."""
    if os.environ.get("GIT_SHA"):
        return os.environ["GIT_SHA"]
    if _own_checkout():
        return _git("rev-parse", "HEAD") or None
    return BUILD_COMMIT.read_text().strip() or None if BUILD_COMMIT.is_file() else None


def version(pkg: str) -> str | None:
    """Installed version of distribution `pkg`, or None."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def _device() -> tuple[str | None, str | None]:
    """(GPU name or "cpu", CUDA version) from an already imported torch; (None, None) without."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    if not torch.cuda.is_available():
        return "cpu", torch.version.cuda
    return torch.cuda.get_device_name(), torch.version.cuda


def command_line() -> str:
    """sys.argv joined, the program named relative to the checkout (or by its file name)."""
    if not sys.argv:
        return ""
    prog = Path(sys.argv[0])
    if prog.is_absolute():
        prog = prog.relative_to(REPO) if prog.is_relative_to(REPO) else Path(prog.name)
    return " ".join([str(prog), *sys.argv[1:]])


def stamp(**extra: Any) -> dict[str, Any]:
    """Provenance of a result, plus `extra` fields (e.g. options=..., command=...).

    Returns {"package_version", "git_sha", "git_dirty" (None outside this checkout),
    "date" (UTC, ISO seconds), "gpu" (the machine's current
    CUDA device name, "cpu" without CUDA, None when torch is not loaded), "platform",
    "versions": {python, cuda, *PACKAGES}, **extra}.
    """
    status = _git("status", "--porcelain") if _own_checkout() else None
    gpu, cuda = _device()
    versions = {"python": platform.python_version(), "cuda": cuda,
                **{pkg: version(pkg) for pkg in PACKAGES}}
    return {
        "package_version": version(DIST),
        "git_sha": git_sha(),
        "git_dirty": None if status is None else bool(status),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "platform": platform.platform(),
        "versions": versions,
        **extra,
    }
