"""`EngineOptions`: every switch that picks a code path of the engine, in one frozen object.

A target carries its options (`Target.options`, set by the loaders); the forward, the engine
and the kernels read them from there, as explicit arguments, and every launcher stamps
`options.asdict()` into its result records, so a number always names the path that made it.
Pure stdlib: launchers parse the shared flags (`add_arguments`, `from_args`) before torch is
imported.

    p = argparse.ArgumentParser(); add_arguments(p)
    opts = from_args(p.parse_args(["--no-fused-qk", "--unsplit-width", "1024"]))
    target = random_target("tiny", options=opts)        # or target.with_options(opts)
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class EngineOptions:
    """The engine's code-path switches; the defaults are the measured-best paths.

    The kernel switches act on CUDA only (the CPU runs the PyTorch oracles whatever they say)
    and are read when the CUDA graphs are captured: change them through
    `Target.with_options`, which gives the target fresh graphs.
    """

    fused_qk: bool = True
    """q/k RMSNorm, RoPE and the K/V pool write of each target layer as one Triton launch
    (ops.qk_norm_rope_write) instead of the eager sequence. The fused path rounds once (fp32
    math), the eager one three times, so outputs may differ by bf16 ulps."""

    triton_gemv: bool = True
    """The wqkv, wo and down projections of steps of at most ops.GEMV_MAX_ROWS tokens
    (decode, a batch-1 verify block) through the Triton GEMV (kernels/gemv) instead of
    cuBLAS: decode streams weights, and the tuned GEMV streams them faster."""

    triton_gemv_gate_up: bool = False
    """With triton_gemv, gate_up through the Triton GEMV too. Off: cuBLAS already streams
    that wide projection near the memory bound."""

    deferred_residual: bool = True
    """Each layer hands its MLP output to the next one unadded: the residual add runs fused
    with the next layer's input RMSNorm (one Inductor kernel) instead of alone at the end of
    the layer. The same bf16 sums (bitwise the same outputs), one launch fewer per layer."""

    draft_kernels: bool = True
    """The drafter's layers (DFlash, DSpark, the variants) take the target's kernel switches
    (fused_qk, triton_gemv, deferred_residual) instead of cuBLAS and the eager q/k
    sequence. fused_qk rounds once, so drafts may differ by bf16 ulps (never the verified
    tokens)."""

    unsplit_width: int = 0
    """Short-context attention rule: a paged_attention launch whose table width is at most
    this runs unsplit (no split-K, no merge launch). 0 turns it off. A shape rule, so safe
    under CUDA graphs."""

    fused_merge: bool = False
    """Split-K attention merges inside the split programs (the last one of each head writes
    the output) instead of in a second launch: one launch fewer per layer."""

    tall_tree: bool = False
    """A tree verify's attention (T <= 64 nodes, T * nh / nkv <= 256 rows) in one tall tile
    per (request, KV head, split) with the ancestor mask as one bit word per node
    (kernels/paged_attention/tree.py) instead of the tree rule's 16-row tiles: each prefix
    key read once per KV head. The same attention (outputs equal to the oracle's)."""

    compile_dynamic: bool = False
    """torch.compile the layer with dynamic=True (every dim symbolic, the hidden size too).
    Off: automatic dynamic (a dim turns symbolic once it changes between calls), so the
    hidden size stays static and Inductor keeps a norm's row in one persistent reduction
    instead of a looped one (~90 us less per batch-1 decode step of Qwen3-8B shapes on an
    H200, same tokens). Applies at `Target.enable_compile` (and `with_options` recompiles a
    compiled layer when it changes)."""

    pdl: bool = True
    """In decode steps (one token per request), our Triton launches of a layer (the GEMVs,
    the fused q/k tail, the attention and its merge) as programmatic dependent launches
    (kernels/pdl.py, sm_90+): each kernel's programs get resident while the one before
    drains, and wait on it on the device. The same kernels and reads (bitwise the same
    outputs); cuBLAS and Inductor launch as usual. ~50 us less per batch-1 decode step of
    Qwen3-8B shapes on an H200; the draft and verify blocks launch plainly, as PDL slowed
    them (model.uses_pdl)."""

    compiled_prefill: bool = False
    """Prefill through the torch.compile'd layer (dynamic shapes) instead of the eager one,
    to cut the host's launch cost of long prefills; off until it measures better."""

    graphed_decode: bool = True
    """Plain greedy decoding runs each step's prepare_block, forward, argmax and outputs as
    one CUDA graph (Engine.round) instead of the forward's graph amid eager launches; the
    same kernels of the forward, so the same tokens. Sampling keeps the eager sampler."""

    fused_commit: bool = False
    """At greedy, a round's acceptance and the proposer's commit (DFlash: the draft-KV
    injection) run inside the verify CUDA graph, for proposers whose commit is device work
    only (`Proposer.commit_in_graph`): one graph launch where there were an eager Triton
    launch and a second graph. Results are published after the commit instead of before."""

    gemv_tune: bool = True
    """Time the GEMV's candidate configs (and cuBLAS) on the first CUDA call of each shape
    and keep the fastest; off: the deterministic default config."""

    gemv_tune_graph: bool = True
    """Time those candidates as the decode graph runs them (CUDA-graph replays cycling
    copies of W past L2); off: triton's do_bench, whose L2 flush between calls mis-ranks the
    small projections."""

    gemv_cublas_fallback: bool = True
    """Call cuBLAS for a shape where the tuning timed it faster than every Triton candidate;
    off: the Triton kernel whatever the timings (to measure the kernel alone)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise ValueError(f"EngineOptions.{f.name} must be a bool, got {value!r}")
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                    or value < 0):
                raise ValueError(f"EngineOptions.{f.name} must be an int >= 0, got {value!r}")

    def asdict(self) -> dict:
        """{field: value}, JSON-ready: what result records stamp as "engine_options"."""
        return dataclasses.asdict(self)

    def replace(self, **changes) -> EngineOptions:
        """A copy with `changes` applied (validated like the constructor)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ValueError(f"unknown EngineOptions fields {unknown}")
        return dataclasses.replace(self, **changes)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add one flag per field: `--fused-qk/--no-fused-qk` for a bool, `--unsplit-width N` for
    an int. Every flag defaults to None (not given), so `from_args` keeps the field's
    default; the help text is the field's docstring's first sentence."""
    group = parser.add_argument_group("engine options (common/engine_options.py)")
    default = EngineOptions()
    docs = _field_docs()
    for f in fields(EngineOptions):
        help_text = f"{docs.get(f.name, '')} (default: {getattr(default, f.name)})"
        if f.type == "bool":
            group.add_argument(_flag(f.name), dest=f"engine_{f.name}", default=None,
                               action=argparse.BooleanOptionalAction, help=help_text)
        else:
            group.add_argument(_flag(f.name), dest=f"engine_{f.name}", default=None, type=int,
                               metavar="N", help=help_text)
    return parser


def from_args(ns: argparse.Namespace, base: EngineOptions | None = None) -> EngineOptions:
    """The options `add_arguments`' flags in `ns` ask for, on top of `base` (the defaults)."""
    base = base or EngineOptions()
    given = {f.name: getattr(ns, f"engine_{f.name}") for f in fields(EngineOptions)
             if getattr(ns, f"engine_{f.name}", None) is not None}
    return base.replace(**given)


def to_argv(options: EngineOptions) -> list[str]:
    """The flags that rebuild `options` through `from_args` (only fields off their default):
    for a launcher that starts another."""
    default, argv = EngineOptions(), []
    for f in fields(options):
        value = getattr(options, f.name)
        if value == getattr(default, f.name):
            continue
        if f.type == "bool":
            argv.append(_flag(f.name) if value else "--no-" + _flag(f.name)[2:])
        else:
            argv += [_flag(f.name), str(value)]
    return argv


def _field_docs() -> dict[str, str]:
    """First sentence of each field's docstring (the attribute docstrings in the source)."""
    import ast
    import inspect

    try:
        source = inspect.getsource(EngineOptions)
    except OSError:  # no source shipped: flags without help text
        return {}
    docs, last = {}, None
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign):
            last = node.target.id
        elif last and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docs[last] = " ".join(node.value.value.split()).split(". ")[0].rstrip(".")
            last = None
    return docs
