"""DSpark vs DFlash on the toy world at equal depth and steps: one command, torch only.

    python -m reference.toy.dspark_study --artifacts artifacts/toy --out outputs/dspark_study

Reads a finished recipe folder (reference/toy/recipe.py: tokenizer/, target/, data/,
dflash-b16/), trains DSpark with gamma = B-1 and dflash-b16's depth, anchors, batch, lr and
steps (at most --max-minutes of wall time), retrains DFlash for the steps DSpark reached when
that is fewer (--retrain-dflash auto), then decodes held-out test prompts with every drafter
at T = 1 and T = 0 (full verification, reference engine). DSpark's confidences are
calibrated by sequential temperature scaling on validation-split rounds and scored on the
test rounds. Writes into --out: results.json, tau_per_position.csv (survival
P(accept_len >= k) and conditional acceptance per position), calibration.csv (ECE before
and after STS, AUC per position), reliability.png, survival.png, report.md, and the trained
drafters (dspark/, dflash-equal/ if retrained).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import torch

from reference import dspark_calibrate as cal
from reference.dspark import load_dspark
from reference.generate import generate
from reference.loaders import load_dflash, load_target
from reference.toy.gen_data import load_dataset, split_prompts
from reference.toy.stages import release
from reference.toy.tokenizer import EOT, MASK, load_tokenizer
from reference.toy.train_dflash import DFlashTrainConfig, train_dflash
from reference.toy.train_dspark import DSparkTrainConfig, train_dspark


def survival(accept: np.ndarray, gamma: int) -> tuple[list[float], list[float]]:
    """S(k) = P(accept_len >= k) and alpha_k = S(k) / S(k-1), k = 1..gamma."""
    s = [float((accept >= k).mean()) for k in range(1, gamma + 1)]
    prev = [1.0, *s[:-1]]
    return s, [a / b if b > 0 else 0.0 for a, b in zip(s, prev)]


def decode(target, prompts, proposer, temperature: float, max_new: int, stop: int) -> dict:
    out = generate(
        target,
        prompts,
        proposer=proposer,
        max_new_tokens=max_new,
        temperature=temperature,
        stop_token_ids=(stop,),
        seed=1,
    )
    accept = np.array([c - 1 for per in out.accept_lengths for c in per])
    return {"tau": out.stats["tau"], "rounds": len(accept), "accept": accept}


def dspark_rounds(target, path, prompts, temperature, max_new, stop):
    """Rounds of DSpark at full length with raw confidences: (tau, c (N, gamma), accept)."""
    records: list = []
    prop = load_dspark(path, target, temperature=temperature, records=records)
    res = decode(target, prompts, prop, temperature, max_new, stop)
    c = torch.cat([r[0] for r in records]).numpy().astype(np.float64)
    accept = torch.cat([r[2] for r in records]).numpy()
    return res["tau"], c, accept


def plots(out: Path, rows: list[dict], c_test, c_cal, accept, gamma: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = cal.survival_labels(accept, gamma).ravel()
    fig, ax = plt.subplots(figsize=(5, 5))
    for name, c in (("raw", c_test), ("STS", c_cal)):
        mean_p, freq, n = cal.reliability(np.cumprod(c, axis=1).ravel(), y)
        ok = n > 0
        ax.plot(
            mean_p[ok],
            freq[ok],
            "o-",
            label=f"{name} (ECE {cal.ece(np.cumprod(c, 1).ravel(), y):.3f})",
        )
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set(
        xlabel="predicted prefix survival a_k",
        ylabel="observed P(accept_len >= k)",
        title="DSpark confidence calibration (test, T=1)",
    )
    ax.legend()
    fig.savefig(out / "reliability.png", dpi=120, bbox_inches="tight")
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        ax.plot(
            range(1, gamma + 1),
            row["survival"],
            marker=".",
            label=f"{row['drafter']} T={row['temperature']:g} (tau {row['tau']:.2f})",
        )
    ax.set(xlabel="draft position k", ylabel="P(accept_len >= k)", title="Survival per position")
    ax.legend(fontsize=7)
    fig.savefig(out / "survival.png", dpi=120, bbox_inches="tight")
    plt.close("all")


def train(args, target, data, mask_id: int) -> dict:
    """DSpark at dflash-b16's settings; a DFlash retrain if DSpark reached fewer steps."""
    dflash_dir = args.artifacts / "dflash-b16"
    ref = json.loads((dflash_dir / "metrics.json").read_text())
    d = ref["config"]
    cfg = DSparkTrainConfig(
        gamma=d["block_size"] - 1,
        markov_rank=args.markov_rank,
        num_layers=d["num_layers"],
        num_features=d["num_features"],
        num_anchors=d["num_anchors"],
        batch=d["batch"],
        steps=ref["steps_done"],
        lr=d["lr"],
        seed=d["seed"],
        max_minutes=args.max_minutes,
    )
    info = {"dflash_b16": {k: v for k, v in ref.items() if k != "history"}}
    info["dspark"] = {
        k: v
        for k, v in train_dspark(target, data, args.out / "dspark", cfg, mask_id).items()
        if k != "history"
    }
    done = info["dspark"]["steps_done"]
    retrain = args.retrain_dflash == "always" or (
        args.retrain_dflash == "auto" and done < ref["steps_done"]
    )
    if retrain:
        dcfg = DFlashTrainConfig(**{**d, "steps": done, "max_minutes": args.dflash_minutes})
        m = train_dflash(target, data, args.out / "dflash-equal", dcfg, mask_id)
        info["dflash_equal"] = {k: v for k, v in m.items() if k != "history"}
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", type=Path, required=True, help="a finished recipe folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-minutes", type=float, default=3.5, help="DSpark training wall time")
    ap.add_argument("--dflash-minutes", type=float, default=2.5)
    ap.add_argument("--retrain-dflash", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--markov-rank", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=64, help="per split (validation, test)")
    ap.add_argument("--max-new", type=int, default=128)
    args = ap.parse_args()
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    target = load_target(
        args.artifacts / "target",
        device="cuda" if cuda else "cpu",
        dtype=torch.bfloat16 if cuda else torch.float32,
    )
    tok = load_tokenizer(args.artifacts / "tokenizer" / "tokenizer.json")
    stop, data = tok.token_to_id(EOT), load_dataset(args.artifacts / "data" / "train.safetensors")
    info = train(args, target, data, tok.token_to_id(MASK))
    lens = data.prompt_lens
    span = (int(lens.min()), int(lens.max()))
    prompts = {s: split_prompts(tok, s, args.prompts, span, 7) for s in ("validation", "test")}
    gamma = info["dspark"]["config"]["gamma"]
    _, c_val, acc_val = dspark_rounds(
        target, args.out / "dspark", prompts["validation"], 1.0, args.max_new, stop
    )
    temps = cal.fit_sts(c_val, acc_val)
    tau, c_test, acc_test = dspark_rounds(
        target, args.out / "dspark", prompts["test"], 1.0, args.max_new, stop
    )
    (args.out / "dspark" / "calibration.json").write_text(
        json.dumps({"temperatures": temps.tolist()})
    )
    drafters = {"dspark": None, "dflash-b16": args.artifacts / "dflash-b16"}
    if (args.out / "dflash-equal").is_dir():
        drafters["dflash-equal"] = args.out / "dflash-equal"
    rows = []
    for name, path in drafters.items():
        for temp in (1.0, 0.0):
            prop = (
                load_dspark(args.out / "dspark", target, temperature=temp)
                if path is None
                else load_dflash(path, target)
            )
            res = decode(target, prompts["test"], prop, temp, args.max_new, stop)
            s, alpha = survival(res["accept"], gamma)
            rows.append(
                {
                    "drafter": name,
                    "temperature": temp,
                    "tau": res["tau"],
                    "rounds": res["rounds"],
                    "survival": s,
                    "alpha": alpha,
                }
            )
    release(target)
    c_cal = cal.apply_temperatures(c_test, temps)
    calib = {
        "temperatures": temps.tolist(),
        "ece_before": cal.survival_ece(c_test, acc_test).tolist(),
        "ece_after": cal.survival_ece(c_cal, acc_test).tolist(),
        "auc": cal.conditional_auc(c_test, acc_test).tolist(),
        "held_out_rounds": {"validation": len(acc_val), "test": len(acc_test)},
    }
    y = cal.survival_labels(acc_test, gamma).ravel()
    calib["ece_pooled_before"] = cal.ece(np.cumprod(c_test, 1).ravel(), y)
    calib["ece_pooled_after"] = cal.ece(np.cumprod(c_cal, 1).ravel(), y)
    plots(args.out, rows, c_test, c_cal, acc_test, gamma)
    write(args.out, info, rows, calib, tau, time.time() - t0)


def write(
    out: Path, info: dict, rows: list[dict], calib: dict, tau_records: float, wall_s: float
) -> None:
    """results.json, the two CSVs and report.md."""
    gamma = len(rows[0]["survival"])
    results = {
        "training": info,
        "decode": rows,
        "calibration": calib,
        "wall_s": wall_s,
        "dspark_tau_calibration_run": tau_records,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "tau_per_position.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["drafter", "temperature", "k", "survival", "alpha"])
        for r in rows:
            for k in range(gamma):
                w.writerow([r["drafter"], r["temperature"], k + 1, r["survival"][k], r["alpha"][k]])
    with open(out / "calibration.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["k", "temperature", "ece_before", "ece_after", "auc"])
        for k in range(gamma):
            w.writerow(
                [
                    k + 1,
                    calib["temperatures"][k],
                    calib["ece_before"][k],
                    calib["ece_after"][k],
                    calib["auc"][k],
                ]
            )
    steps = {k: v["steps_done"] for k, v in info.items()}
    lines = [
        "# DSpark vs DFlash (toy world)",
        "",
        f"Steps: {steps}. Depth {info['dspark']['config']['num_layers']} layers, "
        f"gamma {gamma}. Wall {wall_s:.0f} s on {results['device']}.",
        "",
        "| drafter | T | tau | rounds | alpha_1 | alpha_8 | alpha_15 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a = r["alpha"]
        lines.append(
            f"| {r['drafter']} | {r['temperature']:g} | {r['tau']:.3f} | {r['rounds']} "
            f"| {a[0]:.3f} | {a[min(7, gamma - 1)]:.3f} | {a[-1]:.3f} |"
        )
    auc = np.nanmean(calib["auc"])
    lines += [
        "",
        f"Calibration (test rounds, T=1): pooled ECE of a_k "
        f"{calib['ece_pooled_before']:.4f} -> {calib['ece_pooled_after']:.4f} after STS; "
        f"mean per-position ECE {np.mean(calib['ece_before']):.4f} -> "
        f"{np.mean(calib['ece_after']):.4f}; mean conditional AUC {auc:.3f}.",
        "",
        "Files: results.json, tau_per_position.csv, calibration.csv, reliability.png, "
        "survival.png.",
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
