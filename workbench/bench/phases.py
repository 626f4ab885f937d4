"""`python -m workbench.bench.phases`: each device phase of a DFlash round (batch 1 unless
--batch-size), and the AR step, replayed alone from its CUDA graph: what the phase costs and
which kernels make it.

workbench.bench splits a round's wall time into draft, verify, accept, inject and host. This
script opens the device phases. One AR run and one DFlash run (the oracle proposer at tau
with DFlash's own drafter work, as in workbench.bench) capture the engine's graphs; every
`GraphCache.run` call is recorded with its inputs, and the last call of each phase (decode,
draft, verify, inject) at the full batch is then replayed alone, `--reps` times back to
back (requests finish at ragged rounds, so a batch's last calls run smaller buckets). Per
phase:

- device time per replay: CUDA events around the replays (on the CPU: wall time of the eager
  calls, for a smoke run);
- the weight bytes the phase must stream: the target's layers and LM head for the AR step
  and the verify; the drafter's layers and the shared LM head for the draft; the drafter's
  fc and K/V rows for the injection. With the copy bandwidth measured in the same run, that
  gives the phase's floor and its share of it;
- its top kernels by device time (torch profiler over `--profile-reps` replays).

A replay writes only the KV slots its recorded call wrote, which belong to a finished
request by then, or (the graphed decode step, EngineOptions.graphed_decode, which looks its
slot up in the table) slot 0, the padding slot its released row maps to; nothing decodes
after the replays.

    python -m workbench.bench.phases --out phases.json          # Qwen3-8B shapes, H200
    python -m workbench.bench.phases --batch-size 16 --out p16.json  # a bs-16 round
    python -m workbench.bench.phases --device cpu --preset tiny  # a smoke run
    python -m workbench.bench.phases --deferred-residual --out p.json  # EngineOptions flags
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

from common import engine_options
from common.stamps import stamp
from reference.cuda_graphs import flatten, unflatten
from reference.generate import generate
from reference.loaders import preset_config, random_state_dict, random_target
from reference.methods import BuildContext, MethodSpec, build
from reference.model import Target
from workbench.errors import need_cuda, run_main

PHASES = ("decode", "draft", "verify", "inject")


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.nbytes for t in tensors)


def weight_bytes(target: Target, drafter) -> dict[str, int]:
    """Bytes of weights each phase reads at least once (embedding rows and KV not counted:
    at batch 1 and a context of a few hundred tokens they are under 1% of each phase)."""
    target_w = nbytes(*(t for layer in target.layers for t in layer.tensors()), target.norm,
                      target.head)
    draft_w = nbytes(*(t for layer in drafter.layers for t in layer.tensors()), drafter.norm,
                     target.head)
    return {"decode": target_w, "verify": target_w, "draft": draft_w,
            "inject": nbytes(drafter.fc, drafter.hidden_norm, drafter.w_kv)}


class Recorder:
    """Wraps a GraphCache's `run`: keeps the last call of each key kind (key[0]) among those
    with the most input elements (the full batch: a padded bucket's inputs are smaller) and
    replays it alone. On CUDA the captured graph replays on its static inputs, which hold
    that call's inputs, so recording adds no work to the measured run; without graphs (the
    CPU) the call's input tensors are kept as copies and the function runs again. A run
    nested in another (in its capture on CUDA) is part of it and is not recorded."""

    def __init__(self, graphs):
        self.graphs, self.inner, self.calls, self.depth = graphs, graphs.run, {}, 0
        graphs.run = self._run

    def _run(self, key, fn: Callable, *inputs):
        if self.graphs.capturing or self.depth:  # nested: part of the outer call
            return self.inner(key, fn, *inputs)
        leaves, spec = flatten(inputs)
        size = sum(t.numel() for t in leaves)
        if size >= self.calls.get(key[0], (0,))[0]:
            kept = None if self.graphs.enabled else tuple(t.clone() for t in leaves)
            flat_fn = fn if spec is None else (
                lambda *xs, fn=fn, spec=spec: fn(*unflatten(spec, iter(xs))))
            self.calls[key[0]] = (size, key, flat_fn, kept, self.graphs.full_key(key, inputs))
        self.depth += 1
        try:
            return self.inner(key, fn, *inputs)
        finally:
            self.depth -= 1

    def replay(self, kind: str) -> None:
        _, key, fn, inputs, full_key = self.calls[kind]
        with torch.inference_mode():  # the graphs' static inputs are inference tensors
            if inputs is None:
                self.graphs.replay_last(full_key)
            else:
                self.inner(key, fn, *inputs)

    def close(self) -> None:
        self.graphs.run = self.inner


def time_phase(replay: Callable[[], None], reps: int, cuda: bool) -> float:
    """Milliseconds per replay, `reps` replays back to back after 3 warm ones."""
    for _ in range(3):
        replay()
    if not cuda:
        start = time.perf_counter()
        for _ in range(reps):
            replay()
        return (time.perf_counter() - start) / reps * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(reps):
        replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / reps


def top_kernels(replay: Callable[[], None], reps: int, cuda: bool, rows: int) -> list[dict]:
    """The `rows` costliest kernels (CUDA) or operators (CPU) of one replay: name, calls and
    microseconds per replay, their share of the phase's device time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(reps):
            replay()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        events = [(e.key, e.count, e.self_device_time_total) for e in prof.key_averages()
                  if e.device_type == DeviceType.CUDA]
    else:
        events = [(e.key, e.count, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(us for _, _, us in events) or 1.0
    events.sort(key=lambda e: -e[2])
    return [{"kernel": name, "calls": count / reps, "us": us / reps, "share": us / total}
            for name, count, us in events[:rows]]


def measure(target: Target, prompts: list[list[int]], new_tokens: int, tau: float,
            block_size: int, preset: str, reps: int, profile_reps: int, rows: int) -> dict:
    """Capture AR and DFlash graphs at batch len(prompts), then time and profile each phase
    alone."""
    cuda = target.device.type == "cuda"
    drafter = build(MethodSpec.of("dflash", random=preset, block_size=block_size), target)
    setup = build(MethodSpec.of("oracle", block_size=block_size, shadow=True), target,
                  BuildContext(streams=[[0]] * len(prompts), drafter=drafter))
    # the first call sizes the pool (draft layers, full context) for every later call
    generate(target, prompts, proposer=setup, max_new_tokens=new_tokens)
    ar = generate(target, prompts, max_new_tokens=new_tokens)
    context = BuildContext(prompts, new_tokens, ar.tokens, drafter)
    oracle = f"oracle:tau={tau},block_size={block_size},shadow=true"
    generate(target, prompts, proposer=build(oracle, target, context),
             max_new_tokens=new_tokens)
    recorder = Recorder(target.runtime.graphs)
    try:
        generate(target, prompts, max_new_tokens=4)
        spec = generate(target, prompts, proposer=build(oracle, target, context),
                        max_new_tokens=new_tokens)
        missing = [p for p in PHASES if p not in recorder.calls]
        if missing:
            raise RuntimeError(f"no graph call recorded for phases {missing}; recorded "
                               f"{sorted(recorder.calls)}")
        wbytes = weight_bytes(target, drafter.drafter)
        phases = {}
        for kind in PHASES:
            replay = lambda kind=kind: recorder.replay(kind)  # noqa: E731
            ms = time_phase(replay, reps, cuda)
            phases[kind] = {"ms": ms, "weight_bytes": wbytes[kind],
                            "kernels": top_kernels(replay, profile_reps, cuda, rows)}
    finally:
        recorder.close()
    stats = spec.stats
    return {"phases": phases, "tau": stats["tau"], "dflash_tok_s": stats["tokens_per_s"],
            "round_split_ms": {k: 1e3 * stats[f"{k}_s"] / stats["rounds"]
                               for k in ("draft", "verify", "accept", "inject", "host")
                               if f"{k}_s" in stats}}


def with_bandwidth(result: dict, bandwidth: float | None) -> dict:
    """Each phase's floor (weight bytes at the copy bandwidth, reads only) and share of it."""
    result["copy_bandwidth_tb_s"] = None if bandwidth is None else bandwidth / 1e12
    if bandwidth is None:
        return result
    for name, phase in result["phases"].items():
        floor_ms = phase["weight_bytes"] / bandwidth * 1e3
        phase["floor_ms"] = floor_ms
        phase["of_floor"] = floor_ms / phase["ms"]
        if phase["of_floor"] > 1.0:
            raise RuntimeError(f"{name}: {phase['ms']:.3f} ms is faster than streaming its "
                               f"weights at the copy bandwidth ({floor_ms:.3f} ms): a timing "
                               f"bug")
    return result


def print_report(r: dict) -> None:
    bw = r["copy_bandwidth_tb_s"]
    print(f"{r.get('gpu') or 'cpu'}  copy bandwidth {bw:.2f} TB/s" if bw else "cpu")
    print(f"{'phase':<8} {'ms':>8} {'weights GB':>10} {'floor ms':>8} {'of floor':>8}")
    for name, p in r["phases"].items():
        floor = f"{p['floor_ms']:8.3f} {p['of_floor']:8.0%}" if "floor_ms" in p else ""
        print(f"{name:<8} {p['ms']:8.3f} {p['weight_bytes'] / 1e9:10.3f} {floor}")
    for name, p in r["phases"].items():
        print(f"\n{name}: top kernels per replay")
        for k in p["kernels"]:
            print(f"  {k['us']:9.1f} us {k['share']:6.1%} x{k['calls']:<5g} {k['kernel'][:90]}")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="qwen3-8b")
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=1, help="requests per round")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--tau", type=float, default=6.5)
    p.add_argument("--reps", type=int, default=200, help="timed replays per phase")
    p.add_argument("--profile-reps", type=int, default=20, help="profiled replays per phase")
    p.add_argument("--rows", type=int, default=12, help="kernels listed per phase")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default=None)
    engine_options.add_arguments(p)
    args = p.parse_args(argv)
    args.device = need_cuda(args.device, "python -m workbench.bench.phases",
                            "python -m workbench.bench.phases --device cpu --preset tiny "
                            "--reps 2 --profile-reps 1")
    opts = engine_options.from_args(args)
    cuda = args.device == "cuda"
    cfg = preset_config(args.preset)
    dtype = torch.bfloat16 if cuda else torch.float32
    prompts = torch.randint(0, cfg.vocab_size, (args.batch_size, args.prompt_len),
                            generator=torch.Generator().manual_seed(0)).tolist()
    state = random_state_dict(cfg, device=args.device, dtype=dtype)
    target = random_target(args.preset, device=args.device, dtype=dtype, state=state,
                           options=opts)
    if cuda:
        target.enable_compile()
    measured = measure(target, prompts, args.new_tokens, args.tau, args.block_size,
                       args.preset, args.reps, args.profile_reps, args.rows)
    result = stamp(args=vars(args), engine_options=opts.asdict(), **measured)
    if cuda:
        from kernels.timing import copy_bandwidth

        bandwidth = copy_bandwidth()
    else:
        bandwidth = None
    with_bandwidth(result, bandwidth)
    print_report(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    raise SystemExit(run_main("workbench.bench.phases", lambda: main() and 0))  # a dict
