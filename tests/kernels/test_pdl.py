"""kernels/pdl.py: programmatic dependent launches change when a kernel starts, never what
it computes. On the CPU the switch must fall back to a plain launch; on an sm_90+ GPU each
PDL-capable kernel, chained in one CUDA graph, gives bitwise the outputs of plain launches."""

import pytest
import torch

from kernels.pdl import launch_options, use_pdl


def test_pdl_falls_back_to_a_plain_launch_off_cuda():
    assert not use_pdl(True, torch.zeros(1))
    assert not use_pdl(False, torch.zeros(1))
    assert launch_options(False) == {}
    assert launch_options(True) == {"launch_pdl": True}


@pytest.mark.gpu
def test_pdl_chain_in_a_cuda_graph_is_bitwise_the_plain_chain():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("PDL needs sm_90+")
    from kernels.gemv.kernel import gemv
    from kernels.paged_attention.kernel import paged_attention
    from kernels.qk_norm_rope_write.kernel import qk_norm_rope_write

    g = torch.Generator(device="cuda").manual_seed(0)
    dev, dt, nh, nkv, d, hid, ctx = "cuda", torch.bfloat16, 8, 2, 64, 512, 300

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * scale

    wqkv, wo = rand((nh + 2 * nkv) * d, hid, scale=hid**-0.5), rand(hid, nh * d, scale=0.05)
    qn, kn = rand(d), rand(d)
    cs = torch.randn(1, d, device=dev, generator=g)
    k_pool, v_pool = rand(ctx + 4, nkv, d), rand(ctx + 4, nkv, d)
    table = torch.arange(ctx, device=dev, dtype=torch.int32)[None]
    rows = torch.zeros(1, device=dev, dtype=torch.int64)
    pos = torch.full((1, 1), ctx - 1, device=dev, dtype=torch.int64)
    lens = torch.full((1,), ctx, device=dev, dtype=torch.int64)
    loc = torch.full((1,), ctx - 1, device=dev, dtype=torch.int64)
    x0 = rand(1, hid)

    def chain(pdl):
        x = x0
        for _ in range(4):
            qkv = gemv(x, wqkv, pdl=pdl)
            q = qk_norm_rope_write(qkv, qn, kn, cs, loc, k_pool, v_pool, num_heads=nh,
                                   eps=1e-6, pdl=pdl)
            o = paged_attention(q.view(1, 1, nh, d), k_pool, v_pool, table, rows, pos, lens,
                                causal=True, pdl=pdl)
            x = x + gemv(o.view(1, nh * d), wo, pdl=pdl)
        return x

    outs = []
    for pdl in (False, True):
        chain(pdl)  # compile and tune outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = chain(pdl)
        graph.replay()
        torch.cuda.synchronize()
        outs.append(y.clone())
    assert torch.equal(outs[0], outs[1])
