"""EngineOptions: defaults, validation, the shared CLI flags, how the options reach the code
that reads them (target, engine, attention and GEMV calls), the ablation's rows and the
launchers' stamps; and no library code reads a WORKBENCH_* environment variable."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest
import torch

from common.engine_options import EngineOptions, add_arguments, from_args, to_argv
from reference import ops
from reference.generate import generate
from reference.loaders import random_target
from reference.methods.dflash_drafter import random_dflash

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = dict(fused_qk=True, triton_gemv=True, triton_gemv_gate_up=False,
                deferred_residual=True, draft_kernels=True, unsplit_width=0,
                fused_merge=False, compile_dynamic=False, pdl=True, compiled_prefill=False,
                graphed_decode=True, fused_commit=False, gemv_tune=True, gemv_tune_graph=True,
                gemv_cublas_fallback=True, tall_tree=False)


def _parse(argv: list[str]) -> EngineOptions:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return from_args(p.parse_args(argv))


def _prompts(n: int = 2, length: int = 6) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 64, (n, length), generator=g).tolist()


def test_defaults_are_the_documented_ones():
    assert EngineOptions().asdict() == DEFAULTS
    assert random_target("tiny", dtype=torch.float32).options == EngineOptions()


@pytest.mark.parametrize("name, bad", [("fused_qk", 1), ("triton_gemv", "yes"),
                                       ("unsplit_width", -1), ("unsplit_width", True),
                                       ("unsplit_width", 1.5), ("gemv_tune_graph", None)])
def test_invalid_values_raise_naming_the_field(name, bad):
    with pytest.raises(ValueError, match=name):
        EngineOptions(**{name: bad})
    with pytest.raises(ValueError, match=name):
        EngineOptions().replace(**{name: bad})


def test_replace_rejects_unknown_fields_and_the_object_is_frozen():
    with pytest.raises(ValueError, match="fused_q"):
        EngineOptions().replace(fused_q=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineOptions().fused_qk = False  # type: ignore[misc]
    with pytest.raises(ValueError, match="EngineOptions"):
        random_target("tiny", dtype=torch.float32, options={"fused_qk": False})


def test_cli_flags_round_trip():
    assert _parse([]) == EngineOptions()
    opts = _parse(["--no-fused-qk", "--unsplit-width", "1024", "--fused-merge",
                   "--no-gemv-tune-graph", "--compiled-prefill"])
    assert opts == EngineOptions(fused_qk=False, unsplit_width=1024, fused_merge=True,
                                 gemv_tune_graph=False, compiled_prefill=True)
    assert _parse(to_argv(opts)) == opts
    every = EngineOptions(**{k: (not v if isinstance(v, bool) else 64)
                             for k, v in DEFAULTS.items()})
    assert _parse(to_argv(every)) == every
    with pytest.raises(ValueError, match="unsplit_width"):
        _parse(["--unsplit-width", "-3"])


def test_flipping_the_kernel_switches_keeps_greedy_tokens():
    """On the CPU the kernel switches fall back to the oracles: same greedy tokens, plain
    and speculative, for every switch flipped (test_fused_qk checks the switches reach the
    layer and are forced off there)."""
    base = random_target("tiny", dtype=torch.float32)
    want = generate(base, _prompts(), max_new_tokens=8).tokens
    for change in (dict(fused_qk=False), dict(triton_gemv=False),
                   dict(triton_gemv_gate_up=True, unsplit_width=64, fused_merge=True),
                   dict(deferred_residual=False, draft_kernels=False)):
        target = random_target("tiny", dtype=torch.float32, options=EngineOptions(**change))
        assert generate(target, _prompts(), max_new_tokens=8).tokens == want
        spec = generate(target, _prompts(), proposer=random_dflash("tiny", target),
                        max_new_tokens=8)
        assert spec.tokens == want


def _graph_calls(monkeypatch, key) -> list[int]:
    """Records the batch size of every GraphCache.run under a key starting with `key`
    (on the CPU each run calls its function: one run, one graph launch on CUDA)."""
    from reference.cuda_graphs import GraphCache, flatten

    calls, real = [], GraphCache.run

    def spy(self, k, fn, *inputs):
        if k[: len(key)] == key:
            calls.append(flatten(inputs)[0][0].shape[0])
        return real(self, k, fn, *inputs)

    monkeypatch.setattr(GraphCache, "run", spy)
    return calls


def test_fused_commit_runs_acceptance_and_injection_in_the_verify_step(monkeypatch):
    """fused_commit: DFlash's rounds go through the one verify-accept-commit graph (counted),
    with the tokens and commit lengths of the unfused rounds, and the serving loop's
    overlap mode gives the same tokens; a sampling round keeps the unfused path."""
    calls = _graph_calls(monkeypatch, ("verify_commit",))
    base = random_target("tiny", dtype=torch.float32)
    fused = random_target("tiny", dtype=torch.float32,
                          options=EngineOptions(fused_commit=True))
    kw = dict(max_new_tokens=24, stop_token_ids=(5,))
    want = generate(base, _prompts(3), proposer=random_dflash("tiny", base), **kw)
    assert not calls
    for lookahead in (False, True):
        got = generate(fused, _prompts(3), proposer=random_dflash("tiny", fused),
                       lookahead=lookahead, check=True, **kw)
        assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths
    assert len(calls) >= 2 * len(want.accept_lengths[0])
    calls.clear()
    generate(fused, _prompts(3), proposer=random_dflash("tiny", fused), temperature=1.0,
             **kw)
    assert not calls


def test_graphed_decode_runs_each_greedy_step_as_one_call(monkeypatch):
    """graphed_decode: every plain greedy step is one ("decode", "step") graph (counted)
    with the tokens of the eager step, in sync and overlap mode and across a stop token and
    padded batch rows; sampling keeps the eager sampler."""
    calls = _graph_calls(monkeypatch, ("decode", "step"))
    eager = random_target("tiny", dtype=torch.float32,
                          options=EngineOptions(graphed_decode=False))
    kw = dict(max_new_tokens=12, stop_token_ids=(5,))
    want = generate(eager, _prompts(3), **kw)
    assert not calls
    graphed = random_target("tiny", dtype=torch.float32)
    for lookahead in (False, True):
        got = generate(graphed, _prompts(3), lookahead=lookahead, check=True, **kw)
        assert got.tokens == want.tokens and got.accept_lengths == want.accept_lengths
    assert len(calls) >= 2 * (max(len(t) for t in want.tokens) - 1)
    assert set(calls) == {4}  # 3 requests padded to the bucket of 4
    calls.clear()
    sampled = [generate(t, _prompts(3), temperature=1.0, seed=3, **kw).tokens
               for t in (eager, graphed)]
    assert not calls and sampled[0] == sampled[1]


def test_graphed_decode_keeps_the_zoo_targets_tokens():
    """The trained zoo target on held-out prompts (its tokens depend on every key it
    attends to, unlike the tiny random target's, which count up): the graphed step decodes
    the eager step's tokens, in sync and overlap mode."""
    from reference.loaders import load_target
    from toy.eval_sets import held_out_prompts

    zoo = REPO / "experiments" / "zoo"
    prompts = held_out_prompts(zoo / "tokenizer" / "tokenizer.json", "test", 3)
    eager = load_target(zoo / "target", options=EngineOptions(graphed_decode=False))
    want = generate(eager, prompts, max_new_tokens=12).tokens
    graphed = load_target(zoo / "target")
    for lookahead in (False, True):
        assert generate(graphed, prompts, max_new_tokens=12, lookahead=lookahead).tokens == want


def test_attention_switches_reach_every_attention_call(monkeypatch):
    """Target and drafter layers alike pass the target's attention switches to ops."""
    seen = []
    real = ops.paged_attention

    def spy(*args, **kw):
        seen.append((kw["unsplit_max_width"], kw["fused_merge"]))
        return real(*args, **kw)

    monkeypatch.setattr(ops, "paged_attention", spy)
    target = random_target("tiny", dtype=torch.float32,
                           options=EngineOptions(unsplit_width=96, fused_merge=True))
    generate(target, _prompts(), proposer=random_dflash("tiny", target), max_new_tokens=4)
    assert seen and set(seen) == {(96, True)}


@pytest.mark.parametrize("compiled", [False, True])
def test_compiled_prefill_reaches_the_prefill_forward(monkeypatch, compiled):
    from reference.model import Target

    fast = []
    real = Target.forward

    def spy(self, *args, **kw):
        fast.append(kw.get("fast", True))
        return real(self, *args, **kw)

    monkeypatch.setattr(Target, "forward", spy)
    target = random_target("tiny", dtype=torch.float32,
                           options=EngineOptions(compiled_prefill=compiled))
    generate(target, _prompts(), max_new_tokens=1)
    assert fast[0] is compiled


def test_with_options_moves_the_pool_and_drops_the_graphs():
    target = random_target("tiny", dtype=torch.float32)
    generate(target, _prompts(), max_new_tokens=2)
    rt = target.runtime
    other = target.with_options(EngineOptions(fused_qk=False))
    assert other.options.fused_qk is False and target.options.fused_qk is True
    assert target.runtime is None and other.runtime.pool is rt.pool
    assert other.runtime.graphs is not rt.graphs
    assert other.embed is target.embed and other.fast_layer is target.fast_layer
    assert generate(other, _prompts(), max_new_tokens=2).tokens == \
        generate(target, _prompts(), max_new_tokens=2).tokens
    with pytest.raises(ValueError, match="EngineOptions"):
        target.with_options(DEFAULTS)


def test_compile_dynamic_recompiles_a_compiled_layer_only_when_it_changes():
    from reference.model import residual_layer

    target = random_target("tiny", dtype=torch.float32)
    assert target.with_options(EngineOptions(compile_dynamic=True)).fast_layer \
        is residual_layer  # never compiled: stays eager
    target.enable_compile()
    same = target.with_options(EngineOptions(fused_qk=False))
    assert same.fast_layer is target.fast_layer
    dynamic = same.with_options(EngineOptions(compile_dynamic=True))
    assert dynamic.fast_layer is not target.fast_layer
    assert dynamic.fast_layer is not residual_layer


def test_ablation_rows_carry_distinct_options():
    from workbench.bench.ablate import VARIANTS, ablate, variant_options

    base = EngineOptions(gemv_tune_graph=False)
    opts = variant_options(base, 512)
    assert list(opts) == [v[0] for v in VARIANTS]
    assert len(set(opts.values())) == len(VARIANTS)
    assert opts["all off"] == base.replace(fused_qk=False, triton_gemv=False,
                                           deferred_residual=False, compile_dynamic=True,
                                           pdl=False, graphed_decode=False)
    assert not opts["qk+gemv+defer+static"].compile_dynamic
    assert opts["+graphed step"] == opts["qk+gemv+defer+static+pdl"].replace(
        graphed_decode=True)
    assert opts["+attn rule"].unsplit_width == 512
    assert all(not o.gemv_tune_graph for o in opts.values())  # base's tuning kept
    with pytest.raises(ValueError, match="nope"):
        variant_options(base, 512, ["nope"])
    target = random_target("tiny", dtype=torch.float32, options=base)
    result = ablate(target, _prompts(1, 8)[0], 4, 512, repeats=1,
                    names=["all off", "+fused qk", "+attn rule"])
    rows = result["variants"]
    assert [r["engine_options"] for r in rows] == [
        opts[n].asdict() for n in ("all off", "+fused qk", "+attn rule")]
    assert all(r["same_tokens_as_first"] for r in rows)


def test_reference_bench_stamps_its_options(capsys):
    from workbench.bench.decode import main

    result = main(["--preset", "tiny", "--device", "cpu", "--ablate", "--new-tokens", "4",
                   "--prompt-len", "8", "--ablate-repeats", "1", "--variants", "all off",
                   "--no-fused-qk", "--unsplit-width", "32"])
    capsys.readouterr()
    assert result["engine_options"] == {**DEFAULTS, "fused_qk": False, "unsplit_width": 32}


def test_decode_prints_its_options(capsys):
    from workbench.decode.cli import main

    main(["random:tiny", "--device", "cpu", "--max-new-tokens", "4", "--prompt-len", "6",
          "--no-triton-gemv"])
    out = capsys.readouterr().out
    assert "engine options: fused_qk=True, triton_gemv=False" in out


def test_no_library_code_reads_workbench_environment_variables():
    """Engine and trainer switches are explicit options and flags, never WORKBENCH_* env
    variables: none may appear in the source outside tests/ and the docs (*.md) and the
    benchmark records (logs, data)."""
    pattern = re.compile("WORKBENCH" + "_")
    found = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if (not path.is_file() or rel.parts[0] in ("tests", ".git")
                or path.suffix not in (".py", ".sh", ".yaml", ".yml", ".toml", ".cfg")):
            continue
        text = path.read_text(errors="replace")
        found += [f"{rel}:{i}" for i, line in enumerate(text.splitlines(), 1)
                  if pattern.search(line)]
    assert found == [], f"WORKBENCH_* in library code: {found}"


@pytest.mark.parametrize("gate_up", [False, True])
def test_gemv_warm_up_tunes_every_projection_at_every_row_bucket(monkeypatch, gate_up):
    """On CUDA with triton_gemv, warm_up_gemv hands the GEMV tuner each layer's wqkv, wo
    and down (and gate_up with triton_gemv_gate_up) at M = 1, 2, 4, 8, 16: the buckets of
    every prefill chunk of 1..16 rows. Off (or on the CPU) it tunes nothing."""
    from kernels.gemv import tune
    from reference.model import Target

    calls = []
    monkeypatch.setattr(tune, "warm_up", lambda ws, rows, tuning: calls.append((ws, rows)))
    target = random_target(preset="tiny", seed=0)
    target.warm_up_gemv()
    assert calls == []  # the CPU
    monkeypatch.setattr(Target, "device", property(lambda self: torch.device("cuda")))
    target.with_options(EngineOptions(triton_gemv=False)).warm_up_gemv()
    assert calls == []
    target.with_options(EngineOptions(triton_gemv_gate_up=gate_up)).warm_up_gemv()
    (weights, rows), = calls
    want = [w.wqkv for w in target.layers] + [w.wo for w in target.layers] + [
        w.w_down for w in target.layers] + ([w.w_gate_up for w in target.layers] * gate_up)
    assert sorted(map(id, weights)) == sorted(map(id, want)) and len(weights) == len(want)
    assert list(rows) == [1, 2, 4, 8, 16]
