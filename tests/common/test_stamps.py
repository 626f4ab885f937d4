"""The provenance stamp (common/stamps.py): its keys, extras passed through, no absolute
paths and no hostname."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from common import stamps

REPO = Path(__file__).resolve().parents[2]
KEYS = {"git_sha", "git_dirty", "date", "gpu", "platform", "versions"}


def _strings(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)
    elif isinstance(x, str):
        yield x


def test_keys_versions_and_extras():
    s = stamps.stamp(options={"cuda_graphs": True, "block_size": 16}, quick=False)
    assert KEYS <= set(s) and s["options"] == {"cuda_graphs": True, "block_size": 16}
    assert not s["quick"]
    assert {"python", "cuda", "numpy", "torch", "triton", "simpy"} <= set(s["versions"])
    assert s["versions"]["numpy"] and s["date"].endswith("+00:00")
    assert s["git_sha"] is None or len(s["git_sha"]) == 40
    json.dumps(s)


def test_no_absolute_path_and_no_hostname(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(REPO / "workbench" / "__main__.py"), "validate"])
    s = stamps.stamp(command=stamps.command_line())
    assert not [v for v in _strings(s) if v.startswith("/") or str(REPO) in v]
    host = socket.gethostname()
    if len(host) >= 6:
        assert host not in json.dumps(s)


def test_gpu_is_read_from_a_loaded_torch():
    torch = pytest.importorskip("torch")
    want = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    assert stamps.stamp()["gpu"] == want


def test_git_sha_from_the_environment(monkeypatch):
    monkeypatch.setenv("GIT_SHA", "c86f26b")
    assert stamps.stamp()["git_sha"] == "c86f26b"


def test_command_line_names_the_program_relative_to_the_checkout(monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(REPO / "workbench" / "__main__.py"), "simulate"])
    assert stamps.command_line() == "workbench/__main__.py simulate"
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/pytest", "-q"])
    assert stamps.command_line() == "pytest -q"
