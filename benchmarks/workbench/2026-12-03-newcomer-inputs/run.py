"""Run every input of inputs.txt as a newcomer would and write results.md: one row each.

    python benchmarks/workbench/2026-12-03-newcomer-inputs/run.py [OUTDIR] [--only WORD]

Each line of inputs.txt is run as `python -m <line>` through the shell, from one scratch
folder (OUTDIR, default a fresh temporary folder; lines that share a run folder see each
other's results), with the repository on PYTHONPATH and a 300 s limit. The row records the
exit status, whether anything printed a Python traceback, and the last line of stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def run(line: str, cwd: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": os.environ.get(
        "CUDA_VISIBLE_DEVICES", "")}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(f"{sys.executable} -m {line}", shell=True, cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=300)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", "", (e.stderr or b"").decode(errors="replace")
    lines = [x for x in err.splitlines() if x.strip()] or [x for x in out.splitlines()
                                                           if x.strip()][-1:]
    return {"input": line, "rc": rc, "traceback": "Traceback" in err,
            "stderr_lines": len([x for x in err.splitlines() if x.strip()]),
            "last": (lines[-1] if lines else "").strip()[:160],
            "s": time.perf_counter() - t0}


def main() -> int:
    args = sys.argv[1:]
    only = args[args.index("--only") + 1] if "--only" in args else None
    rest = [a for i, a in enumerate(args) if a != "--only" and (i == 0 or args[i - 1] != "--only")]
    cwd = Path(rest[0]) if rest else Path(tempfile.mkdtemp(prefix="newcomer-"))
    cwd.mkdir(parents=True, exist_ok=True)
    lines = [x.strip() for x in (HERE / "inputs.txt").read_text().splitlines()
             if x.strip() and not x.startswith("#") and (only is None or only in x)]
    rows = []
    for line in lines:
        r = run(line, cwd)
        rows.append(r)
        print(f"{r['rc']!s:>7} tb={int(r['traceback'])} {r['s']:5.1f}s  {line}\n"
              f"        {r['last']}", flush=True)
    md = ["| input | exit | traceback | stderr lines | last line |", "|---|---|---|---|---|"]
    for r in rows:
        last = r["last"].replace("|", "\\|")
        cmd = r["input"].replace("|", "\\|")
        md.append(f"| `{cmd}` | {r['rc']} | {'yes' if r['traceback'] else 'no'} | "
                  f"{r['stderr_lines']} | {last} |")
    (cwd / "results.md").write_text("\n".join(md) + "\n")
    bad = sum(r["traceback"] for r in rows)
    print(f"{len(rows)} inputs, {bad} tracebacks; table: {cwd / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
