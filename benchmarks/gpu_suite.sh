#!/usr/bin/env bash
# The GPU test suite, run beside every GPU measurement: the kernel and reference tests under
# the gpu hypothesis profile (real Triton compiles, bucketed shapes), timed, with the
# compiled variants per kernel; or the GPU-only mutations of tests/mutation/catalog.py.
# The tests run in 8 pytest-xdist processes (the H200 image has pytest-xdist; a test costs
# mostly its Triton and inductor compiles, which are CPU work, and the machine has 16 cores;
# tests/conftest.py gives each worker its share of the cores for torch threads and inductor's
# compile workers; tests marked slow are collected first: they start at once, on one worker
# that compiles the engine once for all of them; with --dist worksteal, DIST's default, the
# other workers take that worker's fast tests off it, so the slow ones set the wall);
# WORKERS=0 runs them in one process. -v
# names every test as it ends, so a run cut short still says which tests failed
# (pytest-xdist prints the failures' reports only at the end).
# Run it alone on the GPU: beside other GPU work its tests run slower and hide the target.
#
#   bash benchmarks/gpu_suite.sh suite OUT        (target: under 3 minutes on an H200)
#   bash benchmarks/gpu_suite.sh mutations OUT    (5 mutations, each its GPU tests)
#
# suite: OUT gets pytest_gpu.txt (pytest's output: results, the 25 slowest tests, compiled
# variants per Triton kernel), tests.tsv (each test's outcome and seconds, written as it
# ends) and gpu_suite.json (wall seconds, exit status, counts, stamp).
# mutations: OUT gets mutation_gpu/ (results.json, results.md) and mutation_gpu.log.
# On a copy of the tree without .git, set GIT_SHA for the stamp.
set -u
part=$1
out=$2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
case $part in
  suite)
    dist=()
    [ "${WORKERS:-8}" != 0 ] && dist=(--dist "${DIST:-worksteal}")
    start=$(date +%s.%N)
    HYPOTHESIS_PROFILE=gpu timeout 900 python -m pytest tests/kernels tests/reference -v -rfE \
      --test-log "$out/tests.tsv" \
      -n "${WORKERS:-8}" "${dist[@]}" -p no:cacheprovider --durations=25 \
      >"$out/pytest_gpu.txt" 2>&1
    rc=$?
    end=$(date +%s.%N)
    python - "$out" "$rc" "$start" "$end" <<'PY'
import json, os, re, sys
from pathlib import Path

import torch  # noqa: F401  (the stamp reads the GPU name from a loaded torch)

from common.stamps import stamp

out, rc = Path(sys.argv[1]), int(sys.argv[2])
text = (out / "pytest_gpu.txt").read_text()
last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)",
                                            last[-1])} if last else {}
workers, dist = os.environ.get("WORKERS", "8"), os.environ.get("DIST", "worksteal")
doc = stamp(command=f"HYPOTHESIS_PROFILE=gpu python -m pytest tests/kernels tests/reference "
                    f"-n {workers} --dist {dist}",
            wall_s=round(float(sys.argv[4]) - float(sys.argv[3]), 1), exit_status=rc,
            counts=counts)
(out / "gpu_suite.json").write_text(json.dumps(doc, indent=1) + "\n")
print(json.dumps(doc))
PY
    tail -n 3 "$out/pytest_gpu.txt"
    exit $rc
    ;;
  mutations)
    timeout 580 python -m tests.mutation --gpu --timeout 240 --out "$out/mutation_gpu" \
      >"$out/mutation_gpu.log" 2>&1
    rc=$?
    tail -n 8 "$out/mutation_gpu.log"
    exit $rc
    ;;
  *)
    echo "usage: bash benchmarks/gpu_suite.sh suite|mutations OUT" >&2
    exit 2
    ;;
esac
