"""The `kernels` package: lazy triton import, `triton_available`, and the self-check."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import check


def test_import_kernels_does_not_import_triton():
    code = "import kernels, sys; assert 'triton' not in sys.modules, 'triton imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_triton_available_follows_device_and_interpreter(monkeypatch):
    cpu = torch.zeros(1)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.triton_available(cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not kernels.triton_available(cpu)


def test_kernels_check_agrees_on_every_case(capsys):
    assert check.main([]) == 0
    out = capsys.readouterr().out
    assert all(op in out for op in kernels.OPS)


def test_every_op_folder_is_discovered_with_its_whole_protocol():
    """A kernel is its folder: the package finds it, exports launcher and oracle, and its
    bench's check cases and run fit the signatures kernels.check and kernels.bench call."""
    import importlib
    import inspect

    folders = sorted(p.parent.name for p in Path(kernels.__file__).parent.glob("*/ref.py"))
    assert list(kernels.OPS) == folders and len(folders) == 7
    for op in kernels.OPS:
        assert callable(getattr(kernels, op)) and callable(getattr(kernels, f"{op}_ref"))
        bench = importlib.import_module(f"kernels.{op}.bench")
        sig = inspect.signature(bench.check)
        for case in (*bench.CHECKS, bench.BENCH_CHECK):
            sig.bind("cuda", *case)
        inspect.signature(bench.run).bind(object())


@pytest.mark.gpu
def test_launchers_never_sync_with_the_host():
    """No launcher reads a device value on the host (.item(), bool(), nonzero, ...)."""
    from kernels import accept_bonus, kv_materialize, prepare_block

    dev = "cuda"
    ids = torch.tensor([3, 4], device=dev)
    table = torch.arange(40, dtype=torch.int32, device=dev).view(2, 20)
    pools = torch.zeros(2, 1, 30, 2, 32, device=dev)
    kv_args = (torch.randn(8, 16, device=dev), torch.randn(1, 128, 16, device=dev),
               torch.ones(1, 32, device=dev), torch.rand(30, 32, device=dev),
               torch.arange(8, device=dev), torch.arange(8, device=dev) + 1, pools[0], pools[1])
    cand, top1, commit = table[:, :4].long(), table[:, 1:5].long(), ids - 2

    def launch_all():
        prepare_block(ids, ids, ids - 3, table, block_size=4, mask_token_id=7)
        accept_bonus(cand, top1, ids)
        kv_materialize(*kv_args, eps=1e-6, commit_lens=commit, block_size=4)

    launch_all()  # compile outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch_all()
    finally:
        torch.cuda.set_sync_debug_mode("default")
