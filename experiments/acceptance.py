"""`python -m experiments.acceptance [overrides]`: measured acceptance of the toy drafters.

For every held-out split, temperature, drafter and test-time block size, decodes the split's
prompts with the toy target (reference engine, batched) plainly and speculatively, side by
side. The prompts are the committed evaluation sets (experiments/zoo/prompts, made by
toy/eval_sets.py), the same on every machine; `prompts=corpus` draws them from this
interpreter's stdlib instead. results.md opens with the loop-aware headline: tau (mean
commit length per round, pooled over rounds) over all requests and over the outputs below
the `low_repetition` threshold of 4-gram repetition, and tau by output position
([0, 64) and [64, 256)), each with 2 SE and its counts. It also reports the
commit-length histogram, the survival curve S(k) = P(commit_len >= k) with the conditional
acceptance alpha_k = S(k+1) / S(k), the repetition rate of the outputs (degenerate loops
inflate tau), how many requests equal plain decoding token for token (T = 0), the speedup
in tokens/s over plain decoding in the same run and the draft time per round (both
meaningful on the GPU only: block drafters are flat in B, chain drafters grow with it).
Requests are decoded `batch_size` at a time (64 by default), so the speedup is at that
batch whatever `num_prompts` is (a whole 1024-prompt split in one batch is the
compute-bound regime, where speculation stops paying).
Drafters are folders under `artifacts` (the recipe's dflash-b16 / dflash-b8, or
ablations/<name> from toy/ablations.py), loaded by
`toy.variants.load_variant`. When `artifacts` is the default artifacts/toy and no recipe has
made it, the committed zoo (experiments/zoo: the target and both main drafters) is read.
Writes results.csv, curves.csv, requests.csv, results.md, survival.png, commit_hist.png and
config_resolved.yaml into the Hydra run folder (the report itself:
experiments/acceptance_report.py).

Hydra composes the config when it is installed; without it (the GPU machine) the same
`key=value` and `study=NAME` overrides are applied by `config_without_hydra`.

Examples:
    python -m experiments.acceptance                        # artifacts/toy, else the zoo
    python -m experiments.acceptance artifacts=experiments/zoo "splits=[test]" \
        "temperatures=[0.0]" num_prompts=8 max_new_tokens=32 device=cpu  # CPU, ~1 min
    python -m experiments.acceptance study=block_size      # train B in {8,16} x test B
    python -m experiments.acceptance study=ablations       # tables 9, 10, 13, decay, EAGLE
    python -m experiments.acceptance study=latency         # draft ms per round vs B (GPU)
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.paths import conf_dir
from experiments.acceptance_report import (
    EQUAL_PLAIN_NOTE,
    headline_columns,
    headline_table,
    markdown_table,
    plot_curves,
    write_csv,
)
from experiments.acceptance_stats import (
    LOW_REPETITION,
    POSITION_WINDOWS,
    acceptance_curves,
    low_repetition_tau,
    position_tau,
    repetition_rate,
    rounds_in_window,
)

DEFAULT_ARTIFACTS = "artifacts/toy"
ZOO = "experiments/zoo"


@dataclass
class AcceptanceConfig:
    """Schema of conf/acceptance/config.yaml; block_sizes empty: each drafter's own B.
    prompts "committed": the first num_prompts of each split's committed set in
    prompt_sets (toy/eval_sets.py; prompt_len must be its rule, max_files unset);
    "corpus": drawn from this interpreter's stdlib by prompt_len, seed + 1, max_files.
    warm_up false: no untimed warm-up runs (the CPU, where tokens/s are not the point)."""

    artifacts: str = DEFAULT_ARTIFACTS
    prompts: str = "committed"
    prompt_sets: str = "experiments/zoo/prompts"
    low_repetition: float = LOW_REPETITION
    drafters: list[str] = field(default_factory=lambda: ["dflash-b16", "dflash-b8"])
    block_sizes: list[int] = field(default_factory=list)
    splits: list[str] = field(default_factory=lambda: ["validation", "test"])
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    num_prompts: int = 64
    batch_size: int = 64
    prompt_len: list[int] = field(default_factory=lambda: [64, 256])
    max_new_tokens: int = 256
    max_files: int | None = None
    device: str = "auto"
    seed: int = 0
    plots: bool = True
    warm_up: bool = True


def decode_in_batches(target, prompts: list[list[int]], batch_size: int, **kw):
    """`reference.generate.generate` over `prompts`, `batch_size` requests at a time: one
    GenerateOutput whose stats hold the summed rounds, new tokens and times (`*_s`), and
    tokens_per_s over the summed decode time."""
    from reference.generate import GenerateOutput, generate

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    parts = [generate(target, prompts[i:i + batch_size], **kw)
             for i in range(0, len(prompts), batch_size)]
    summed = [k for k in parts[0].stats if k in ("rounds", "new_tokens") or k.endswith("_s")]
    stats = {k: sum(o.stats[k] for o in parts) for k in summed}
    stats["tokens_per_s"] = (stats["new_tokens"] - len(prompts)) / max(stats["decode_s"], 1e-9)
    return GenerateOutput([t for o in parts for t in o.tokens],
                          [a for o in parts for a in o.accept_lengths], stats)


def measure(cfg: AcceptanceConfig) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows of results.csv (one per split, T, drafter, test B), of curves.csv and of
    requests.csv (one per request of each: the prompt's length, rounds, tokens committed,
    repetition; what experiments/acceptance_compare.py pairs between two runs)."""
    import torch

    from reference.loaders import load_target
    from toy.eval_sets import held_out_prompts
    from toy.tokenizer import EOT, load_tokenizer
    from toy.variants import load_variant

    root = Path(cfg.artifacts)
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available()
                                                      else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    target = load_target(root / "target", device=device, dtype=dtype)
    tok_path = root / "tokenizer" / "tokenizer.json"
    tok = load_tokenizer(tok_path)
    rows, curves, requests, warmed = [], [], [], set()
    for split in cfg.splits:
        prompts = held_out_prompts(tok_path, split, cfg.num_prompts, source=cfg.prompts,
                                   prompt_len=tuple(cfg.prompt_len), seed=cfg.seed + 1,
                                   max_files=cfg.max_files, folder=Path(cfg.prompt_sets))
        for temp in cfg.temperatures:
            kw = dict(max_new_tokens=cfg.max_new_tokens, temperature=temp, seed=cfg.seed,
                      stop_token_ids=(tok.token_to_id(EOT),))
            # Plain decoding warms up with a whole run the first time at this T: a short
            # warm-up would leave the compile of every batch size that finishing requests
            # leave in the timed run.
            short = {"max_new_tokens": 4} if ("plain", temp) in warmed else {}
            warmed.add(("plain", temp))
            if cfg.warm_up:
                decode_in_batches(target, prompts, cfg.batch_size, **{**kw, **short})
            plain = decode_in_batches(target, prompts, cfg.batch_size, **kw)
            for name in cfg.drafters:
                for block in cfg.block_sizes or [None]:
                    proposer = load_variant(root / name, target, block_size=block)
                    # Warm-up (graph capture, compilation) kept out of the timed run: a whole
                    # run the first time a kind of proposer meets this B and T (every batch
                    # size that finishing requests leave compiles its kernels), else a short
                    # one for this proposer's own graphs.
                    kind = (type(proposer).__name__, proposer.block_size, temp)
                    short = {"max_new_tokens": 2 * proposer.block_size} if kind in warmed else {}
                    warmed.add(kind)
                    if cfg.warm_up:
                        decode_in_batches(target, prompts, cfg.batch_size, proposer=proposer,
                                          **{**kw, **short})
                    spec = decode_in_batches(target, prompts, cfg.batch_size,
                                             proposer=proposer, **kw)
                    c = acceptance_curves(spec.accept_lengths, proposer.block_size)
                    headline = headline_columns(
                        c, low_repetition_tau(spec.accept_lengths, spec.tokens,
                                              cfg.low_repetition),
                        position_tau(spec.accept_lengths))
                    key = {"drafter": name, "train_B": trained_block_size(root / name),
                           "test_B": proposer.block_size, "split": split, "T": temp}
                    rows.append({**key, "tau": c["tau"], "tau_se": c["tau_se"],
                                 "rounds": c["rounds"], **headline,
                                 "full_block": c["hist"][-1],
                                 "repetition": repetition_rate(spec.tokens),
                                 "equal_plain": sum(a == b for a, b in zip(spec.tokens,
                                                                           plain.tokens)),
                                 "prompts": len(prompts), "prompt_source": cfg.prompts,
                                 "device": device,
                                 "batch": min(cfg.batch_size, len(prompts)),
                                 "tokens_per_s": spec.stats["tokens_per_s"],
                                 "ar_tokens_per_s": plain.stats["tokens_per_s"],
                                 "speedup": spec.stats["tokens_per_s"]
                                 / max(plain.stats["tokens_per_s"], 1e-9),
                                 "draft_ms_per_round": 1e3 * spec.stats["draft_s"]
                                 / max(spec.stats["rounds"], 1)})
                    requests += [{**key, "request": i, "prompt_len": len(p),
                                  "rounds": len(a), "committed": sum(a),
                                  "repetition": repetition_rate([t]), **window_counts(a)}
                                 for i, (p, a, t) in enumerate(zip(prompts, spec.accept_lengths,
                                                                   spec.tokens))]
                    for k in range(1, proposer.block_size + 1):
                        curves.append({**key, "k": k, "hist": c["hist"][k - 1],
                                       "survival": c["survival"][k - 1],
                                       "alpha": c["alpha"][k - 1] if k < proposer.block_size
                                       else ""})
                    print(f"{name} B={proposer.block_size} {split} T={temp}: "
                          f"tau {c['tau']:.2f}", flush=True)
    return rows, curves, requests


def window_counts(commits: list[int]) -> dict:
    """requests.csv's per-window columns of one request: rounds starting in each output
    position window of POSITION_WINDOWS and the tokens they committed."""
    cols = {}
    for lo, hi in POSITION_WINDOWS:
        sub = rounds_in_window(commits, lo, hi)
        cols.update({f"rounds_pos{lo}_{hi}": len(sub), f"committed_pos{lo}_{hi}": sum(sub)})
    return cols


def trained_block_size(drafter_dir: Path) -> int:
    """The B a drafter was trained at: its config.json's block_size (a loaded proposer
    carries the evaluation B, which `block_size=` overrides)."""
    return int(json.loads((drafter_dir / "config.json").read_text())["block_size"])


def artifacts_folder(artifacts: str) -> str:
    """The recipe folder to read: `artifacts`, or the committed zoo when `artifacts` is the
    default and holds no target (no recipe has run on this machine). Exits with one line
    when neither holds a target (an installed copy ships no zoo: run from a checkout)."""
    if artifacts == DEFAULT_ARTIFACTS and not (Path(artifacts) / "target").is_dir():
        if not (Path(ZOO) / "target").is_dir():
            raise SystemExit(f"acceptance: neither {artifacts} nor the committed zoo ({ZOO}) "
                             "holds a target: run from the repository's checkout, or pass "
                             "artifacts=DIR of a trained recipe")
        print(f"acceptance: {artifacts} has no target; reading the committed zoo, {ZOO}",
              flush=True)
        return ZOO
    return artifacts


def run(cfg: AcceptanceConfig, out: Path) -> list[dict]:
    """Measure, then write every output into `out` (results.md ends with the paper's
    orderings these rows decide: experiments/acceptance_checks.py); returns the rows."""
    import yaml

    from experiments.acceptance_checks import checks_markdown

    cfg = dataclasses.replace(cfg, artifacts=artifacts_folder(cfg.artifacts))
    out.mkdir(parents=True, exist_ok=True)
    rows, curves, requests = measure(cfg)
    write_csv(out / "results.csv", rows)
    write_csv(out / "curves.csv", curves)
    write_csv(out / "requests.csv", requests)
    report = (headline_table(rows, cfg.low_repetition) + "## All columns\n\n"
              + markdown_table(rows) + EQUAL_PLAIN_NOTE + checks_markdown(rows))
    (out / "results.md").write_text(report)
    (out / "config_resolved.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg)))
    if cfg.plots:
        plot_curves(curves, out)
    print(report)
    return rows


CONF = conf_dir() / "acceptance"


def config_without_hydra(argv: list[str]) -> AcceptanceConfig:
    """The same composition (schema <- config.yaml <- study/<name>.yaml <- key=value) for a
    machine without Hydra (the GPU machine has pyyaml, not hydra-core or omegaconf)."""
    import yaml

    overrides = dict(arg.split("=", 1) for arg in argv)
    values = {k: v for k, v in yaml.safe_load((CONF / "config.yaml").read_text()).items()
              if k not in ("defaults", "hydra")}
    if "study" in overrides:
        values.update(yaml.safe_load((CONF / "study" / f"{overrides.pop('study')}.yaml")
                                     .read_text()))
    values.update({k: yaml.safe_load(v) for k, v in overrides.items()})
    names = {f.name for f in dataclasses.fields(AcceptanceConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise SystemExit(f"acceptance: unknown keys {unknown}; known: {sorted(names)}")
    return AcceptanceConfig(**values)


def main() -> None:
    """Hydra when installed; otherwise `config_without_hydra`, writing into hydra.run.dir=
    when given, else outputs/acceptance/<date>/<time>/."""
    try:
        import hydra
    except ImportError:
        argv = [a for a in sys.argv[1:] if not a.startswith("hydra.run.dir=")]
        dirs = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("hydra.run.dir=")]
        out = dirs[-1] if dirs else f"outputs/acceptance/{time.strftime('%Y-%m-%d/%H-%M-%S')}"
        run(config_without_hydra(argv), Path(out))
        return
    from hydra.core.config_store import ConfigStore
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="base_acceptance", node=AcceptanceConfig)

    @hydra.main(config_path=str(CONF), config_name="config", version_base=None)
    def app(cfg) -> None:
        run(OmegaConf.to_object(cfg), Path(HydraConfig.get().runtime.output_dir))

    app()


if __name__ == "__main__":
    main()
