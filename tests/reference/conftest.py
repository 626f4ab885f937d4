"""Tiny random checkpoints for the reference-engine tests (CPU, fp32).

The target is written by transformers' `save_pretrained`; the DFlash drafter in the z-lab
format (config.json with dflash_config, safetensors with `layers.*`, `fc`, `hidden_norm`,
`norm`) by `write_drafter`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

from reference.kv_pool import KVPool
from reference.loaders import load_target
from reference.methods.dflash import load_dflash


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: OpenMP threads only add contention (ms per op on a loaded machine).
    Modules opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = dict(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
            max_position_embeddings=512)


def write_target(path: Path, seed: int = 0, **overrides) -> Qwen3ForCausalLM:
    """Save a random Qwen3ForCausalLM (fp32) to `path` and return it in eval mode."""
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**{**TINY, **overrides})).eval()
    model.save_pretrained(path)
    return model


def drafter_config(target_cfg: dict = TINY, *, layers: int = 2, block_size: int = 4,
                   mask_token_id: int | None = None, target_layer_ids=(0, 2),
                   **overrides) -> dict:
    """A z-lab style drafter config.json for a target with config `target_cfg` (TINY's keys)."""
    cfg = {k: target_cfg[k] for k in ("hidden_size", "num_attention_heads",
                                      "num_key_value_heads", "head_dim", "intermediate_size",
                                      "rope_theta", "max_position_embeddings")}
    cfg.update(num_hidden_layers=layers, rms_norm_eps=1e-6, block_size=block_size,
               num_target_layers=target_cfg["num_hidden_layers"],
               dflash_config={"mask_token_id": target_cfg["vocab_size"] - 1
                              if mask_token_id is None else mask_token_id,
                              "target_layer_ids": list(target_layer_ids)})
    cfg.update(overrides)
    return cfg


def drafter_weights(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random z-lab drafter tensors (std 0.2, norms near 1) matching `cfg`."""
    g = torch.Generator().manual_seed(seed)
    h, d, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    k = len(cfg["dflash_config"]["target_layer_ids"])

    def rand(*shape, std=0.2):
        return torch.randn(shape, generator=g) * std

    def norm(n):
        return 1.0 + rand(n, std=0.1)

    out = {"fc.weight": rand(h, k * h), "hidden_norm.weight": norm(h), "norm.weight": norm(h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": rand(nh * d, h),
            p + "self_attn.k_proj.weight": rand(nkv * d, h),
            p + "self_attn.v_proj.weight": rand(nkv * d, h),
            p + "self_attn.o_proj.weight": rand(h, nh * d),
            p + "self_attn.q_norm.weight": norm(d),
            p + "self_attn.k_norm.weight": norm(d),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter),
            p + "input_layernorm.weight": norm(h),
            p + "post_attention_layernorm.weight": norm(h),
        })
    return out


def write_drafter(path: Path, cfg: dict, weights: dict | None = None, seed: int = 0) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    save_file(weights if weights is not None else drafter_weights(cfg, seed),
              str(path / "model.safetensors"))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("target")
    write_target(path)
    return path


@pytest.fixture(scope="session")
def hf_model(tiny_dir) -> Qwen3ForCausalLM:
    return Qwen3ForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def target(tiny_dir):
    return load_target(tiny_dir)


@pytest.fixture(scope="session")
def drafter_dir(tmp_path_factory, tiny_dir) -> Path:
    path = tmp_path_factory.mktemp("drafter")
    write_drafter(path, drafter_config())
    return path


@pytest.fixture(scope="session")
def dflash(drafter_dir, target):
    return load_dflash(drafter_dir, target)


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory):
    """A vocabulary of 8 (target, its transformers model): exact joints by enumeration."""
    path = tmp_path_factory.mktemp("v8")
    write_target(path, seed=1, vocab_size=8, initializer_range=0.4)
    return load_target(path), Qwen3ForCausalLM.from_pretrained(path).eval()


class CheckingKVPool(KVPool):
    """A KVPool whose every unreserved table entry points at a trap slot.

    The pools get one slot more than `num_slots` (the trap, never handed out), rows 1.. of
    the table start filled with it and are refilled with it on release, so a K/V write at a
    position outside its request's reservation lands on the trap instead of the padding slot
    0. `check` adds to KVPool's slot accounting: the trap's K/V were never written (target
    and draft pools), every live row's reserved positions hold exactly its own slots, and
    every other entry is the trap (row 0, the padding row, stays zero). Device reads are
    skipped while a test forbids host-device syncs (torch's sync debug mode).
    """

    def __init__(self, num_slots, max_requests, context_len, target, draft, dtype, device):
        super().__init__(num_slots, max_requests, context_len, target, draft, dtype, device)
        self.trap = num_slots
        self.req_to_token[1:] = self.trap

    def _pools(self, shape, dtype, device):
        size = (shape.num_layers, self.num_slots + 1, shape.num_kv_heads, shape.head_dim)
        return (torch.zeros(size, dtype=dtype, device=device),
                torch.zeros(size, dtype=dtype, device=device))

    def _may_read(self) -> bool:
        """Reading the device is allowed (not under a test of torch's sync debug mode)."""
        return self.req_to_token.device.type != "cuda" or torch.cuda.get_sync_debug_mode() == 0

    def release(self, row: int) -> None:
        n = self.reserved(row)
        super().release(row)
        if self._may_read():
            assert not self.req_to_token[row, :n].any(), "release must clear the row's table"
        self.req_to_token[row] = self.trap

    def check(self) -> None:
        super().check()
        if not self._may_read():
            return
        for name in ("k", "v", "draft_k", "draft_v"):
            pool = getattr(self, name)
            if pool is not None and pool[:, self.trap].any():
                raise AssertionError(f"a {name} write landed outside its request's "
                                     "reservation (the trap slot)")
        table = self.req_to_token.cpu()
        assert not table[0].any(), "the padding row must stay zero"
        owned = set(self._row_slots)
        for row in range(1, table.shape[0]):
            slots = self._row_slots.get(row, [])
            n = len(slots)
            assert sorted(table[row, :n].tolist()) == sorted(slots), f"row {row} table"
            assert (table[row, n:] == self.trap).all(), (
                f"row {row} {'(live)' if row in owned else '(free)'} maps positions beyond "
                f"its reservation of {n} to slots")


@pytest.fixture(autouse=True)
def checking_pool(monkeypatch):
    """Every engine runtime built in these tests uses a CheckingKVPool, checked after every
    serving run (and every step where the run's `check` flag is on)."""
    import reference.engine
    from reference.serve.loop import Server

    monkeypatch.setattr(reference.engine, "KVPool", CheckingKVPool)
    run = Server.run

    def checked_run(self, workload):
        result = run(self, workload)
        self.pool.check()
        return result

    monkeypatch.setattr(Server, "run", checked_run)
