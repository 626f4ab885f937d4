"""The README's commands work as written: every line of the how-to code blocks and every row
of the command table, run on the CPU at tiny scale.

What the test adds to a command, so that it runs in seconds (the command's own arguments are
kept; argparse and Hydra let a later value win):

- `workbench simulate`: 8 requests (1 per client at least), no plots, CSV or progress bar, and
  a temporary run folder;
- `workbench decode`: 4 new tokens after 8-token prompts;
- `workbench reproduce`: a temporary --out, and `--only table10 table8` (two rows read from
  committed data) when the command names no rows;
- `experiments.acceptance`: the test split at T = 0, 1 prompt, 4 new tokens, CPU, no plots or
  warm-up, a temporary run folder;
- `pytest` lines are collected (`--collect-only`), not run; the row that runs the whole suite
  is left to the suite itself.

A command marked "# GPU" in a code block, or whose table row does not run on the CPU, is
checked through its `--help`, and so are `simulator.bench` and `experiments.published` (a
minute and ten on the CPU, no smaller scale), the configuration search (a multirun of 40
trials) and a command on a placeholder folder (`DIR`). In table rows, optional `[...]` parts
are left out and the placeholder TARGET is `random:tiny`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def howto_commands(text: str = README) -> list[tuple[str, bool]]:
    """(command, GPU-only) for every line of the bash blocks of the "How to" section."""
    section = text[text.index("## How to") : text.index("\n## ", text.index("## How to") + 1)]
    lines = [
        ln
        for block in re.findall(r"```bash\n(.*?)```", section, re.S)
        for ln in block.splitlines()
        if ln.strip()
    ]
    return [
        (ln.split("#")[0].strip(), ln.split("#")[-1].strip() == "GPU" if "#" in ln else False)
        for ln in lines
    ]


def table_commands(text: str = README) -> list[tuple[str, bool]]:
    """(first command of the row, runs on the CPU) for every row of the command table."""
    section = text[text.index("## Commands") : text.index("\n## ", text.index("## Commands") + 1)]
    rows = [ln.split(" | ") for ln in section.splitlines() if ln.startswith("| `")]
    return [
        (re.match(r"\| `([^`]*)`", ln[0] + " |").group(1), ln[2].startswith("yes")) for ln in rows
    ]


def strip_placeholders(cmd: str) -> str:
    """The command without its optional `[...]` parts, TARGET as `random:tiny`."""
    cmd = re.sub(r"\s*\[[^\]]*\]", "", cmd)
    return " ".join("random:tiny" if w == "TARGET" else w for w in cmd.split())


def tiny(argv: list[str], tmp: Path) -> list[str]:
    """`argv` with the small-scale overrides of the module docstring."""
    joined = " ".join(argv)
    if "workbench simulate" in joined:
        return [
            *argv,
            "workload.num_requests=8",
            "sweep.min_requests_per_client=1",
            "output.plots=false",
            "output.requests_csv=false",
            "output.progress=false",
            f"hydra.run.dir={tmp}/sim",
        ]
    if "workbench decode" in joined:
        return [*argv, "--max-new-tokens", "4", "--prompt-len", "8"]
    if "workbench calibrate-engine" in joined:  # the fixture runs of both formats
        data = ROOT / "tests" / "data"
        files = [str(data / "sglang_bench_serving.jsonl"), str(data / "vllm_bench_serve.json")]
        return [*(w for w in argv if w != "FILES..."), *files, "--out", str(tmp)]
    if "workbench reproduce" in joined and "--list" not in argv:
        rows = [] if "--only" in argv else ["--only", "table10", "table8"]
        return [*argv, *rows, "--out", str(tmp / "reproduce")]
    if "experiments.acceptance" in joined:
        return [
            *argv,
            "splits=[test]",
            "temperatures=[0.0]",
            "num_prompts=1",
            "max_new_tokens=4",
            "device=cpu",
            "plots=false",
            "warm_up=false",
            f"hydra.run.dir={tmp}/acc",
        ]
    if "pytest" in joined:
        return [*argv, "--collect-only"]
    return argv


def help_of(argv: list[str]) -> list[str]:
    """`python -m MODULE [COMMAND [ACTION]] --help` for a command line (a workbench command
    and its action word, e.g. `validate run`)."""
    i = argv.index("-m")
    sub = []
    if argv[i + 1] == "workbench":
        sub = argv[i + 2 : i + 3]
        sub += [w for w in argv[i + 3 : i + 4] if not w.startswith("-") and "=" not in w]
    return [*argv[: i + 2], *sub, "--help"]


def run(cmd: str, cpu: bool, tmp: Path) -> subprocess.CompletedProcess:
    words = shlex.split(cmd)
    env = dict(os.environ)
    while words and re.match(r"^[A-Z_]+=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words[0] == "python", cmd
    argv = [sys.executable, *words[1:]]
    slow = ("simulator.bench" in argv or "experiments.published" in argv or "DIR" in argv
            or "experiment=config_search" in argv)
    argv = tiny(argv, tmp) if cpu and not slow else help_of(argv)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _check(cmd: str, cpu: bool, tmp: Path) -> None:
    out = run(cmd, cpu, tmp)
    assert out.returncode == 0, f"{cmd}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


@pytest.mark.parametrize(("cmd", "gpu"), howto_commands())
def test_howto_command_runs(cmd, gpu, tmp_path):
    _check(cmd, not gpu, tmp_path)


TABLE = [(strip_placeholders(c), cpu) for c, cpu in table_commands()]
HOWTO = {c for c, _ in howto_commands()}


@pytest.mark.parametrize(
    ("cmd", "cpu"),
    [(c, cpu) for c, cpu in TABLE if c.startswith("python") and c not in HOWTO],
)
def test_table_command_runs(cmd, cpu, tmp_path):
    _check(cmd, cpu, tmp_path)


def test_the_extractors_find_the_readmes_commands():
    """Counted by hand in README.md: 10 how-to lines (1 for the GPU), 23 table rows (13 that
    run on the CPU), the bash runbook and the two torchrun launches among them."""
    howto, table = howto_commands(), table_commands()
    assert len(howto) == 10 and sum(gpu for _, gpu in howto) == 1
    assert len(table) == 23 and sum(cpu for _, cpu in table) == 13
    assert ("bash benchmarks/h200_suite.sh PART OUT", False) in table
    assert strip_placeholders("python -m workbench simulate [overrides]") == (
        "python -m workbench simulate"
    )
    assert strip_placeholders("python -m workbench decode TARGET [--drafter DIR \\| --x]") == (
        "python -m workbench decode random:tiny"
    )


def test_every_module_the_indexes_run_exists():
    """Each `python -m MODULE` of README.md, experiments/README.md and benchmarks/README.md
    names an importable module, and each `python -m workbench NAME` a workbench command."""
    import importlib.util

    from workbench.__main__ import COMMANDS

    texts = [README] + [(ROOT / d / "README.md").read_text() for d in ("experiments", "benchmarks")]
    calls = [m for t in texts for m in re.findall(r"python -m ([\w.]+)(?: ([\w-]+))?", t)]
    assert len(calls) > 40
    missing = [mod for mod, _ in calls if importlib.util.find_spec(mod) is None]
    unknown = [sub for mod, sub in calls if mod == "workbench" and sub and sub not in COMMANDS]
    assert missing == [] and unknown == []
