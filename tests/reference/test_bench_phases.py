"""workbench.bench.phases on the CPU: the weight bytes each phase streams (from the Qwen3
shapes, written out here), replays that write no KV slot but their recorded call's, and the
guard against a phase timed faster than its weights can stream."""

from __future__ import annotations

import pytest
import torch

from reference.generate import generate
from reference.loaders import DFLASH_PRESETS, PRESETS, random_target
from reference.methods import BuildContext, MethodSpec, build
from workbench.bench.phases import (
    PHASES,
    Recorder,
    measure,
    weight_bytes,
    with_bandwidth,
)

F32 = 4


def _layer_params(c: dict) -> int:
    h, d, i = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    return (h + (nh + 2 * nkv) * d * h + 2 * d  # input norm, wqkv, q and k norms
            + h * nh * d + h  # wo, post-attention norm
            + 2 * i * h + h * i)  # gate and up, down


@pytest.fixture(scope="module")
def tiny():
    target = random_target("tiny", device="cpu", dtype=torch.float32)
    drafter = build(MethodSpec.of("dflash", random="tiny"), target)
    return target, drafter


def test_weight_bytes_follow_the_qwen3_shapes(tiny):
    target, drafter = tiny
    t, d = PRESETS["tiny"], DFLASH_PRESETS["tiny"]
    head = t["vocab_size"] * t["hidden_size"]
    h, k = d["hidden_size"], len(d["dflash_config"]["target_layer_ids"])
    kv_rows = d["num_hidden_layers"] * 2 * d["num_key_value_heads"] * d["head_dim"] * h
    want = {
        "decode": (t["num_hidden_layers"] * _layer_params(t) + t["hidden_size"] + head) * F32,
        "draft": (d["num_hidden_layers"] * _layer_params(d) + h + head) * F32,
        "inject": (h * k * h + h + kv_rows) * F32,
    }
    want["verify"] = want["decode"]
    assert weight_bytes(target, drafter.drafter) == want


def test_phases_are_recorded_timed_and_profiled(tiny):
    target, _ = tiny
    prompt = list(range(3, 19))
    r = measure(target, [prompt], new_tokens=20, tau=3.0, block_size=8, preset="tiny", reps=2,
                profile_reps=1, rows=3)
    assert list(r["phases"]) == list(PHASES)
    for phase in r["phases"].values():
        assert phase["ms"] > 0 and 1 <= len(phase["kernels"]) <= 3
        assert sum(k["share"] for k in phase["kernels"]) <= 1 + 1e-9
    assert set(r["round_split_ms"]) == {"draft", "verify", "accept", "inject", "host"}
    assert 1.0 <= r["tau"] <= 8.0


@pytest.fixture(autouse=True)
def checking_pool():
    """The real KVPool here (overrides conftest's checking one): these tests replay graphs
    after their requests finished, and the graphed decode step then writes the slot its
    released row maps to, slot 0 (the padding slot) in the real pool, the trap in the
    checking one."""
    yield


def test_replays_write_only_the_slots_of_their_recorded_calls(tiny):
    target, drafter = tiny
    prompt = list(range(5, 17))
    ar = generate(target, [prompt], max_new_tokens=24)
    context = BuildContext([prompt], 24, ar.tokens, drafter)
    oracle = "oracle:tau=3.0,block_size=8,shadow=true"
    generate(target, [prompt], proposer=build(oracle, target, context), max_new_tokens=24)
    recorder = Recorder(target.runtime.graphs)
    try:
        generate(target, [prompt], max_new_tokens=4)
        generate(target, [prompt], proposer=build(oracle, target, context), max_new_tokens=24)
        pool = target.runtime.pool
        before = [x.clone() for x in (pool.k, pool.v, pool.draft_k, pool.draft_v)]
        for kind in PHASES:
            recorder.replay(kind)
            recorder.replay(kind)
    finally:
        recorder.close()
    # the graphed decode step (key ("decode", "step"), inputs verified_id, prefix_lens,
    # req_rows, valid) writes the slot its row's table maps now; every other call (draft,
    # verify, inject, and the plain decode's verify forward where the step is not one graph)
    # writes its recorded cache_loc (input 2), and a verify forward's rows are input 3
    def slots(key, inputs):
        if key == ("decode", "step"):
            return pool.req_to_token[inputs[2], inputs[1]].long()
        return inputs[2].reshape(-1)

    written = torch.cat([slots(key, inputs)
                         for _, key, _, inputs, _ in recorder.calls.values()])
    decode_key, decode_inputs = recorder.calls["decode"][1], recorder.calls["decode"][3]
    rows = decode_inputs[2] if decode_key == ("decode", "step") else decode_inputs[3]
    assert pool.req_to_token[rows].eq(0).all()  # released
    others = torch.ones(pool.k.shape[1], dtype=torch.bool)  # (layers, slots, nkv, D)
    others[written] = False
    after = (pool.k, pool.v, pool.draft_k, pool.draft_v)
    assert 0 < int(others.sum()) < others.numel()
    for a, b in zip(before, after):
        assert torch.equal(a[:, others], b[:, others])
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the replays ran


def test_a_batch_records_the_last_call_at_its_full_size(tiny):
    """Three requests at tau 3 finish at ragged rounds, so each phase's last calls run fewer
    rows; the recorder keeps the last call of the largest input size seen for each kind
    (sizes seen by a spy installed under it)."""
    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29)), list(range(40, 46))]
    ar = generate(target, prompts, max_new_tokens=30)
    context = BuildContext(prompts, 30, ar.tokens, drafter)
    oracle = "oracle:tau=3.0,block_size=8,shadow=true"
    generate(target, prompts, proposer=build(oracle, target, context), max_new_tokens=30)
    graphs = target.runtime.graphs  # the pool (and its graphs) sized for DFlash above
    seen, inner = [], graphs.run

    def spy(key, fn, *inputs):
        seen.append((key[0], sum(t.numel() for t in inputs), key))
        return inner(key, fn, *inputs)

    graphs.run = spy
    recorder = Recorder(graphs)
    try:
        generate(target, prompts, proposer=build(oracle, target, context), max_new_tokens=30)
    finally:
        recorder.close()
        graphs.run = inner
    for kind in ("draft", "verify"):
        sizes = [size for k, size, _ in seen if k == kind]
        assert max(sizes) > sizes[-1]  # the batch shrank before the run ended
        last_full = [key for k, size, key in seen if k == kind and size == max(sizes)][-1]
        assert recorder.calls[kind][0] == max(sizes) and recorder.calls[kind][1] == last_full


def test_a_phase_faster_than_its_weights_stream_is_a_timing_bug():
    phases = {"verify": {"ms": 1.0, "weight_bytes": 4_000_000_000}}
    ok = with_bandwidth({"phases": {k: dict(v) for k, v in phases.items()}}, 8e12)
    assert ok["phases"]["verify"]["floor_ms"] == pytest.approx(0.5)
    assert ok["phases"]["verify"]["of_floor"] == pytest.approx(0.5)
    with pytest.raises(RuntimeError, match="verify: 1.000 ms is faster"):
        with_bandwidth({"phases": phases}, 2e12)


def test_main_takes_the_engine_option_flags_and_stamps_them(capsys):
    """`--no-deferred-residual --compile-dynamic` reach the measured target's options and
    the record's `engine_options` (a CPU smoke run of the script)."""
    from workbench.bench.phases import main

    r = main(["--device", "cpu", "--preset", "tiny", "--new-tokens", "12", "--prompt-len", "8",
              "--reps", "1", "--profile-reps", "1", "--rows", "2", "--no-deferred-residual",
              "--compile-dynamic"])
    capsys.readouterr()
    assert r["engine_options"]["deferred_residual"] is False
    assert r["engine_options"]["compile_dynamic"] is True
    assert r["engine_options"]["draft_kernels"] is True
    assert set(r["phases"]) == set(PHASES)


@pytest.mark.gpu
def test_replay_last_reruns_a_captured_graph_on_its_last_inputs():
    """On CUDA a recorded phase replays from the graph's static inputs (no copies kept):
    after its output is cleared, the replay writes the last run's result again."""
    from reference.cuda_graphs import GraphCache

    graphs = GraphCache("cuda")
    x = torch.arange(6.0, device="cuda")
    graphs.run(("double",), lambda a: a * 2, x)
    out = graphs.run(("double",), lambda a: a * 2, x + 1)
    out.zero_()
    graphs.replay_last(graphs.full_key(("double",), (x,)))
    assert torch.equal(out, (x + 1) * 2)
