"""Tensor parallelism (reference/parallel.py) on the CPU: two gloo processes against one.

The two ranks are spawned once for the module; each decodes every case of CASES greedily
in fp32 with its shard of the same random tiny target and writes what it proposed and
committed. TP = 2 must propose and commit, token for token and round for round, what the
whole model does alone.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from reference.config import DFlashConfig
from reference.generate import generate
from reference.loaders import (
    DFLASH_PRESETS,
    preset_config,
    random_dflash_state_dict,
    random_state_dict,
    random_target,
)
from reference.methods import MethodSpec, build
from reference.methods.dflash_drafter import DFlashProposer, drafter_from_state_dict
from reference.model import LayerWeights
from reference.parallel import gather_layer, init, shard_layer, split_config

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[3, 17, 42, 9, 100], [7, 7, 250, 31, 64, 2, 19]]
NEW_TOKENS = 10
CASES = {  # name: (dflash options or None for plain decoding, drafter placement)
    "plain": (None, "shard"),
    "dflash": ({}, "shard"),
    "dflash_replicated": ({}, "replicate"),
    "dflash_lookahead": ({"lookahead": True}, "shard"),  # the serving loop's overlap mode
    "tree": ({"tree_budget": 6, "tree_top_k": 2}, "shard"),
}

SCALE = {"self_attn.v_proj": 50.0, "self_attn.o_proj": 500.0, "mlp.gate_proj": 10.0,
         "mlp.up_proj": 10.0, "mlp.down_proj": 200.0}


def _whole_target():
    """The tiny random target with SCALE on its layers, so they, not only its planted
    successor rule (reference/loaders.py), decide the greedy tokens."""
    cfg = preset_config("tiny")
    state = random_state_dict(cfg, device="cpu", dtype=torch.float32)
    for i in range(cfg.num_layers):
        for name, scale in SCALE.items():
            state[f"model.layers.{i}.{name}.weight"] *= scale
    return random_target("tiny", device="cpu", dtype=torch.float32, state=state)


def _decode(target, dflash: dict | None):
    """(tokens, accept lengths, every round's proposed candidates) of a greedy run: plain
    with dflash None, else DFlash with those method options (`lookahead`: overlap rounds).

    The drafter is the tiny random one with larger v, o, gate, up and down weights (SCALE),
    so its layers and its injected context, not only its mask token's embedding, decide
    the drafts."""
    proposer, dflash = None, dict(dflash) if dflash is not None else None
    lookahead = dflash is not None and dflash.pop("lookahead", False)
    if dflash is not None:
        whole = _whole_target()
        cfg = DFlashConfig.from_dict(DFLASH_PRESETS["tiny"], whole.config)
        state = random_dflash_state_dict(cfg, device="cpu", dtype=torch.float32)
        for name, scale in SCALE.items():
            state[f"layers.0.{name}.weight"] *= scale
        drafter = DFlashProposer(drafter_from_state_dict(cfg, state, whole), whole)
        proposer = build(MethodSpec.of("dflash", weights_of=drafter, **dflash), target)
    drafts = []
    if proposer is not None:
        propose = proposer.propose

        def recorded(rnd):
            proposal = propose(rnd)
            drafts.append(proposal.candidates.tolist())
            return proposal

        proposer.propose = recorded
    out = generate(target, PROMPTS, proposer=proposer, max_new_tokens=NEW_TOKENS,
                   lookahead=lookahead)
    return out.tokens, out.accept_lengths, drafts


def _rank(rank: int, port: int, out_dir: str) -> None:
    """One TP rank: every case over gloo; writes {case: (tokens, accept_lengths)}."""
    import os

    from reference import parallel

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    results = {}
    for name, (spec, placement) in CASES.items():
        tp = parallel.init(2, "cpu", drafter=placement)
        results[name] = _decode(parallel.shard_target(_whole_target(), tp), spec)
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each of the two ranks committed per case, [rank 0's, rank 1's]."""
    out = tmp_path_factory.mktemp("tp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("case", list(CASES))
def test_tensor_parallel_greedy_matches_one_device(ranks, case):
    spec, _ = CASES[case]
    alone = _decode(_whole_target(), spec)
    assert ranks[0][case] == alone
    assert ranks[1][case] == alone
    assert all(len(t) == NEW_TOKENS for t in alone[0])


def test_tensor_parallel_drafts_are_compared(ranks):
    """The DFlash cases compare every round's drafts (a random drafter's are rejected, so
    the tokens alone would not see the drafter): there are some, and not all the same."""
    for case in ("dflash", "dflash_replicated", "dflash_lookahead", "tree"):
        drafts = ranks[0][case][2]
        assert len(drafts) >= NEW_TOKENS // 2, case
        assert len({tok for rnd in drafts for row in rnd for tok in row[1:]}) > 1, case


def test_tensor_parallel_shards_reassemble_to_the_whole_layer():
    cfg = preset_config("tiny")  # 4 q heads, 2 KV heads of 16, 128 channels, H = 64
    whole = _whole_target().layers[0]
    shards = [shard_layer(whole, cfg, r, 2) for r in range(2)]
    # rank 1: q heads 2-3 (rows 32..63), KV head 1 of k (rows 64+16..) and of v (96+16..)
    q_rows, kv_rows = list(range(32, 64)), list(range(80, 96)) + list(range(112, 128))
    assert torch.equal(shards[1].wqkv, whole.wqkv[q_rows + kv_rows])
    assert torch.equal(shards[1].w_gate_up, whole.w_gate_up[list(range(64, 128)) +
                                                             list(range(192, 256))])
    assert torch.equal(shards[0].wo, whole.wo[:, :32])
    assert torch.equal(shards[1].w_down, whole.w_down[:, 64:])
    back = gather_layer(shards, cfg)
    for name in LayerWeights._fields:
        a, b = getattr(back, name), getattr(whole, name)
        assert torch.equal(a, b) if isinstance(b, torch.Tensor) else a == b, name


@pytest.mark.parametrize("size, field", [(3, "num_attention_heads=4"),
                                         (4, "num_key_value_heads=2")])
def test_tensor_parallel_size_must_divide_the_heads(size, field):
    with pytest.raises(ValueError, match=f"size {size} does not divide {field}"):
        split_config(preset_config("tiny"), size)


def test_tensor_parallel_needs_as_many_processes(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match=r"--tp 2 needs 2 processes \(torchrun"):
        init(2, "cpu")


def test_tensor_parallel_refuses_an_moe_layer():
    target = random_target("tiny-moe", device="cpu", dtype=torch.float32)
    sparse = next(w for w in target.layers if w.router is not None)
    with pytest.raises(ValueError, match="MoE"):
        shard_layer(sparse, target.config, 0, 2)
