"""The `kernels` package: lazy triton import, `triton_available`, and the self-check."""

import subprocess
import sys

import torch

import kernels
from kernels import check


def test_import_kernels_does_not_import_triton():
    code = "import kernels, sys; assert 'triton' not in sys.modules, 'triton imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_triton_available_follows_device_and_interpreter(monkeypatch):
    cpu = torch.zeros(1)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.triton_available(cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not kernels.triton_available(cpu)


def test_kernels_check_agrees_on_every_case(capsys):
    assert check.main() == 0
    assert "kv_materialize" in capsys.readouterr().out
