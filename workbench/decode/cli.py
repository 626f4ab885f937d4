"""`python -m workbench decode`: decode prompts with the reference engine, AR or speculative.

    python -m workbench decode experiments/zoo/target --drafter experiments/zoo/dflash-b16 \\
        --prompt "def fib(n):" --max-new-tokens 64
    python -m workbench decode experiments/zoo/target --method prompt_lookup:block_size=8 \\
        --prompts experiments/zoo/prompts/prompts-test.jsonl --batch-size 16 --stop "<|endoftext|>"
    python -m workbench decode random:tiny --method oracle:tau=3,block_size=8 --batch-size 4

The target is an HF Qwen3ForCausalLM directory or `random:<preset>` (reference.loaders.PRESETS).
The method is a registered one (`--method list` names them) as `name:key=value,...`;
`--drafter DIR` is the method of a drafter folder (DFlash, or an ablation its config names),
`--drafter random` a DFlash drafter with random weights of the preset's shapes; neither is
plain autoregressive decoding. The method is built for each batch (an oracle drafts that
batch's greedy continuations).

Prompts: `--prompt TEXT` or `--prompt-ids "1,2,3"` (both repeatable), or `--prompts FILE`:
one prompt a line, text, or token ids with `--ids`; a .jsonl file holds a JSON string, id
list or {"text", "ids"} object a line (multi-line text; the zoo's prompt sets). Every prompt
is decoded, `--batch-size` at a time. Without prompts: `--batch-size` random prompts of
`--prompt-len` ids. Text goes through the model's own tokenizer (tokenizer.json in the target
folder, or `--tokenizer`). Each completion prints as text, special tokens kept (its ids too
under `--show-ids`; ids alone without a tokenizer, as for random targets), after a line of
its new tokens, rounds and tau; then the pooled tokens/s, tau, commit-length histogram and
per-round time split. `--tp N` under `torchrun --nproc-per-node N` splits the target's heads
(and the drafter's, or not: `--tp-drafter`) across N ranks (reference/parallel.py); rank 0
prints. The engine runs under the shared EngineOptions flags
(common/engine_options.py). Bad input ends the command with one line naming the argument
or file, exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.engine_options import add_arguments, from_args
from workbench.decode.prompts import (
    Prompt,
    UsageError,
    encode,
    load_tokenizer,
    parse_ids,
    read_prompt_file,
    stop_token_ids,
)
from workbench.errors import OneLineParser


def _number(kind: type, rule: str, ok):
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return convert


POSITIVE = _number(int, ">= 1", lambda v: v >= 1)


def _parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m workbench decode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", help="HF Qwen3ForCausalLM directory or random:<preset>")
    p.add_argument(
        "--method",
        default=None,
        help="registered method spec, e.g. oracle:tau=6.5, isd:stride=4, "
        "prompt_lookup:block_size=8; 'list' prints the names",
    )
    p.add_argument("--drafter", default=None, help="drafter folder, or 'random'")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--prompt", action="append", metavar="TEXT", help="a text prompt")
    given.add_argument(
        "--prompt-ids",
        action="append",
        metavar="IDS",
        help='a prompt of token ids, "1,2,3" or "1 2 3"',
    )
    given.add_argument("--prompts", metavar="FILE", help="one prompt a line (see above)")
    p.add_argument("--ids", action="store_true", help="the --prompts lines are token ids")
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json, or a folder holding one (default: the target's)",
    )
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="STRING",
        help="cut each completion before the first stop string (repeatable); the "
        "engine stops early on a stop string that is one token of the "
        "tokenizer (e.g. '<|endoftext|>'), others only cut the text",
    )
    p.add_argument("--show-ids", action="store_true", help="print each completion's ids too")
    p.add_argument("--batch-size", type=POSITIVE, default=1)
    p.add_argument("--prompt-len", type=POSITIVE, default=64, help="random prompts' length")
    p.add_argument("--max-new-tokens", type=POSITIVE, default=128)
    p.add_argument(
        "--block-size",
        type=POSITIVE,
        default=None,
        help="B of --drafter (default: the drafter's); a --method takes block_size=",
    )
    p.add_argument("--temperature", type=_number(float, ">= 0", lambda v: v >= 0), default=0.0)
    p.add_argument("--top-k", type=_number(int, ">= 0 (0: off)", lambda v: v >= 0), default=0)
    p.add_argument("--top-p", type=_number(float, "in (0, 1]", lambda v: 0 < v <= 1), default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if present)")
    p.add_argument("--compile", action="store_true", help="torch.compile the layers (CUDA)")
    p.add_argument("--tp", type=POSITIVE, default=1, help="tensor-parallel ranks: launch as "
                   "torchrun --nproc-per-node N -m workbench decode ... --tp N")
    p.add_argument("--tp-drafter", choices=("shard", "replicate"), default="shard",
                   help="with --tp: split the DFlash drafter's heads too, or keep it whole")
    add_arguments(p)
    return p


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except UsageError as e:
        parser.error(str(e))


def _given_prompts(args) -> list[Prompt] | None:
    if args.ids and not args.prompts:
        raise UsageError(
            "--ids applies to --prompts FILE (use --prompt-ids for ids on the command line)"
        )
    if args.prompts:
        return read_prompt_file(args.prompts, args.ids)
    if args.prompt_ids:
        return [
            Prompt(f"--prompt-ids {k}", ids=parse_ids(t, f"--prompt-ids {k}"))
            for k, t in enumerate(args.prompt_ids, 1)
        ]
    if args.prompt:
        for k, text in enumerate(args.prompt, 1):
            if not text:
                raise UsageError(f"--prompt {k}: empty text")
        return [Prompt(f"--prompt {k}", text=t) for k, t in enumerate(args.prompt, 1)]
    return None


def _check_flags(args) -> None:
    if "" in args.stop:
        raise UsageError("--stop '': an empty stop string would cut every completion to "
                         "nothing (give a non-empty string)")
    if args.method and args.drafter:
        raise UsageError("give --method or --drafter, not both")
    if args.block_size is not None and not args.drafter:
        raise UsageError("--block-size applies to --drafter; give block_size= in --method")
    if args.drafter == "random" and not args.target.startswith("random:"):
        raise UsageError("--drafter random needs a random:<preset> target")


def _device(name: str | None) -> str:
    import torch

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device name (cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
            raise UsageError(
                f"--device {name}: no CUDA device: torch {torch.__version__} "
                f"({built}) sees no GPU on this machine; use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {name}: no such CUDA device (this machine has "
                f"{torch.cuda.device_count()})"
            )
    elif device.type != "cpu":
        raise UsageError(f"--device {name}: the engine runs on cpu or cuda")
    return name


def _tokenizer(args):
    """(the tokenizer, the line naming it), or (None, why there is none)."""
    if args.tokenizer:
        return load_tokenizer(args.tokenizer), f"tokenizer: {args.tokenizer}"
    if args.target.startswith("random:"):
        return None, f"{args.target} has no tokenizer"
    file = Path(args.target) / "tokenizer.json"
    if file.is_file():
        return load_tokenizer(file, "target"), f"tokenizer: {file}"
    return None, f"{file} not found"


def _run(args) -> int:
    prompts = _given_prompts(args)
    _check_flags(args)
    import torch

    from reference.loaders import load_target, random_target
    from reference.methods import names
    from workbench.decode.run import blame, decode_batches

    if args.method == "list":
        print("\n".join(names()))
        return 0
    device = _device(args.device)
    tp = None
    if args.tp > 1:
        from workbench.bench.tp import join

        with blame("--tp"):
            tp = join(args.tp, device, args.tp_drafter)
        device = tp.device
    preset = args.target.removeprefix("random:") if args.target.startswith("random:") else None
    prompts, ids, tokenizer, which = _encoded(args, preset, prompts)
    spec = _spec(args, preset)
    opts = from_args(args)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with blame(f"target {args.target}" if preset else ""):
        target = (
            random_target(preset, device=device, dtype=dtype, options=opts)
            if preset
            else load_target(args.target, device=device, dtype=dtype, options=opts)
        )
    if tp is not None:
        from reference.parallel import shard_target

        with blame("--tp"):
            target = shard_target(target, tp)
    if args.compile:
        target.enable_compile()
    print(which)
    decode_batches(
        args,
        target,
        prompts,
        ids,
        spec,
        tokenizer,
        stop_token_ids(tokenizer, args.stop) if args.stop else [],
        opts.asdict(),
    )
    return 0


def _encoded(args, preset: str | None, prompts: list[Prompt] | None):
    """Prompts (random ones when none were given) and their ids, checked against the
    target's config before any weight is read; the tokenizer and the line naming it."""
    import torch

    from reference.loaders import preset_config, target_config
    from workbench.decode.run import blame, check_lengths

    with blame(f"target {args.target}" if preset else ""):
        cfg = preset_config(preset) if preset else target_config(args.target)
    tokenizer, which = _tokenizer(args)
    if tokenizer is None:
        if args.stop:
            raise UsageError(f"--stop needs a tokenizer ({which}): give --tokenizer FILE")
        for p in prompts or ():
            if p.ids is None:
                raise UsageError(
                    f"{p.where}: a text prompt needs a tokenizer ({which}): "
                    "give --tokenizer FILE, or token ids (--prompt-ids, --ids)"
                )
        which = f"tokenizer: none ({which}): prompts and completions are token ids"
    if prompts is None:
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(
            0, cfg.vocab_size, (args.batch_size, args.prompt_len), generator=gen
        ).tolist()
        prompts = [Prompt(f"random prompt {k}", ids=tuple(p)) for k, p in enumerate(ids, 1)]
    ids = encode(prompts, tokenizer, cfg.vocab_size)
    check_lengths(prompts, ids, args.max_new_tokens, 1, cfg.max_position)
    return prompts, ids, tokenizer, which


def _spec(args, preset: str | None):
    """The MethodSpec of --drafter or --method (plain decoding when neither is given)."""
    from reference.methods import MethodSpec
    from reference.methods.variants import drafter_spec
    from workbench.decode.run import blame

    block = {} if args.block_size is None else {"block_size": args.block_size}
    if args.drafter == "random":
        return MethodSpec.of("dflash", random=preset, **block)
    if args.drafter:
        with blame("--drafter"):
            return drafter_spec(args.drafter, **block)
    with blame("--method"):
        return MethodSpec.parse(args.method or "none")
