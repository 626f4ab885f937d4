"""The fused merge's memory ordering, and where EARLY_LOADS puts the key loop's loads, read
from the compiled PTX of the attention kernel.

A race between split programs shows on a GPU only when the timing lines up, so the stress
test of test_gpu_hazards.py can pass with a broken order. The order is a property of the
compiled code, and Triton compiles to PTX for an sm_90 target without a GPU (ptxas ships
with Triton), so this test runs everywhere. In the kernel's PTX:

- the per-(b, h, tile) counter is bumped by `atom.global.gpu` with release semantics
  (acq_rel or release: the partials stored before it are visible GPU-wide to whoever reads
  the counter) and acquire semantics (acq_rel or acquire: the merging program reads the
  partials after it); a relaxed atomic gives neither;
- a CTA barrier (`bar.sync`) lies between the program's last partial store and the atomic:
  only one thread bumps the counter, and the release covers the other threads' stores only
  if they happened before it at CTA scope (Triton's acq_rel lowering emits a barrier of its
  own as well as the kernel's explicit `tl.debug_barrier`);
- every global load after the atomic (the merge: other SMs' partials) bypasses L1 (`.cg`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

triton = pytest.importorskip("triton")

from kernels.paged_attention import kernel as attention  # noqa: E402
from kernels.paged_attention.merge import merge_blocks  # noqa: E402

_POINTERS = dict(q_ptr="bf16", k_ptr="bf16", v_ptr="bf16", out_ptr="bf16", acc_ptr="fp32",
                 ml_ptr="fp32", cnt_ptr="i32", table_ptr="i32")  # the rest: int64 tensors


def _fused_ptx(t: int, group: int, splits: int, early: bool = False) -> str:
    """PTX of `_paged_attention_kernel` for sm_90 with the fused merge on, bf16, D = 128, a
    causal launch that is not a tree (one key loop: UNMASKED_BODY off, as the rule gives it)
    (early: with EARLY_LOADS).

    Under TRITON_INTERPRET=1 (the CPU suite) kernels are interpreted functions that Triton
    cannot compile, so the compile runs in a child process without it."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        try:
            return compile_fused(t, group, splits, early)
        except _NO_TARGET as err:
            pytest.skip(f"Triton cannot compile for sm_90 here: {err}")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import sys; from tests.kernels import test_merge_ordering as m\n"
            f"try: sys.stdout.write(m.compile_fused({t}, {group}, {splits}, {early}))\n"
            "except m._NO_TARGET as err: sys.exit(f'{m._NO_BACKEND}: {err}')")
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
    if child.returncode == 1 and child.stderr.startswith(f"{_NO_BACKEND}: "):
        pytest.skip(f"Triton cannot compile for sm_90 here: {child.stderr.strip()}")
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout


_NO_TARGET = (ImportError, FileNotFoundError)  # no CUDA backend or no ptxas here
_NO_BACKEND = "no sm_90 target"


def compile_fused(t: int, group: int, splits: int, early: bool = False) -> str:
    """The compile itself (this process must not interpret Triton)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = attention._paged_attention_kernel
    block_m = min(64, max(16, triton.next_power_of_2(t * group)))
    constexprs = dict(G=group, D=128, CAUSAL=True, WINDOWED=False, TREE=False,
                      BLOCK_M=block_m, BLOCK_N=32, BLOCK_D=128, DOT_PRECISION="tf32",
                      SPLIT=True, FUSED=True, PDL=False, EARLY=early, UNMASKED_BODY=False,
                      **merge_blocks(t * group, block_m, 128, splits))
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*" + _POINTERS.get(name, "i64")
        else:
            signature[name] = "fp32" if name == "sm_scale" else "i32"
    compiled = triton.compile(ASTSource(fn, signature, constexprs),
                              target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=4, num_stages=2))
    return compiled.asm["ptx"]


def _instructions(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines()
            if line.strip() and not line.strip().startswith(("//", ".loc", "$L"))]


@pytest.mark.parametrize("t,splits,early", [(1, 32, False), (16, 8, False), (16, 8, True)])
def test_fused_merge_orders_partials_before_the_counter_and_reads_them_past_l1(t, splits,
                                                                              early):
    """Also with EARLY_LOADS, which moves the key loop's loads (and must compile for sm_90)."""
    code = _instructions(_fused_ptx(t, group=4, splits=splits, early=early))
    atoms = [i for i, line in enumerate(code) if re.search(r"\batom\.", line)]
    assert len(atoms) == 1, f"expected one counter atomic, found {len(atoms)}"
    atom = code[atoms[0]]
    assert ".global" in atom and ".gpu" in atom and ".add" in atom, atom
    sem = re.search(r"\.(relaxed|acquire|release|acq_rel)\b", atom)
    assert sem is not None and sem.group(1) == "acq_rel", (
        f"the counter atomic must release the partials and acquire the others': {atom}")

    stores = [i for i, line in enumerate(code[: atoms[0]]) if "st.global" in line]
    assert stores, "no partial store precedes the counter atomic"
    between = code[stores[-1] + 1: atoms[0]]
    assert any(line.startswith(("bar.sync", "barrier.sync")) for line in between), (
        "no CTA barrier between the last partial store and the counter atomic")

    merge_loads = [line for line in code[atoms[0] + 1:] if "ld.global" in line]
    assert merge_loads, "the merge after the counter loads no partials"
    cached = [line for line in merge_loads if "ld.global.cg" not in line]
    assert not cached, f"{len(cached)} merge loads may hit a stale L1 line: {cached[0]}"


def test_early_loads_issue_a_key_steps_loads_before_its_products():
    """With EARLY_LOADS the compiled key loop issues its K, V and next-slot loads before its
    first tensor-core product, so a step waits on them together; the plain loop issues the
    V loads between the score and the output products."""

    def loads_after_first_mma(early: bool) -> int:
        code = _instructions(_fused_ptx(16, group=4, splits=8, early=early))
        mma = [i for i, line in enumerate(code) if "mma" in line]
        # the merge's loads (.cg, after the counter) are not the key loop's
        return sum(1 for i, line in enumerate(code[: mma[-1]])
                   if i > mma[0] and "ld.global" in line and ".cg" not in line)

    assert loads_after_first_mma(early=False) > 0
    assert loads_after_first_mma(early=True) == 0
