"""Test configuration: hypothesis profiles, the `gpu` marker, Triton's CPU interpreter, the
cores each pytest-xdist worker may use, and (on CUDA) how many variants of each Triton kernel
the session compiled.

`TRITON_INTERPRET=1` must be set before triton is first imported, so it is set here, at
collection time, whenever no CUDA device is present: every kernel test then runs on the CPU.
"""

import os

# Under pytest-xdist the worker processes share the machine's cores: each gets its share of
# torch's intra-op threads and of inductor's compile workers (by default every process
# would take all cores, and 8 GPU-suite workers on 16 cores would run 8x oversubscribed).
# Set before torch is first imported, which reads them then.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS > 1:
    _SHARE = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    os.environ.setdefault("OMP_NUM_THREADS", _SHARE)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", _SHARE)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


HAS_CUDA = _has_cuda()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

settings.register_profile(
    "dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# gpu: kernels compiled for real, each drawn shape a possible compilation, so shapes come
# from a few buckets per dimension (tests/strategies.py `sized`) and examples are few: the
# CPU profiles explore shapes through the same kernel source under the interpreter, the GPU
# run checks the compiled code (with the GPU-only stress tests). Derandomized: a run is
# repeatable on a fresh machine. Target for the whole of tests/kernels and tests/reference:
# under 3 min on an H200 (a cold machine ran past 359 s: benchmarks/tests/2026-12-01-gpu-suite/).
settings.register_profile(
    "gpu",
    max_examples=10,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# slow: more examples, fresh randomness, and the statistical tests over several seeds
# (tests/stats.py `seeds`).
settings.register_profile(
    "slow",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_profile = os.environ.get("HYPOTHESIS_PROFILE", "dev")
if os.environ.get("HYPOTHESIS_NO_SHRINK"):  # the mutation runner: a failure is enough
    settings.register_profile(f"{_profile}-no-shrink", settings.get_profile(_profile),
                              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    _profile = f"{_profile}-no-shrink"
settings.load_profile(_profile)


def pytest_collection_modifyitems(config, items):
    """Tests marked slow are collected first (stable), so pytest-xdist's first chunk puts
    them on one worker, which compiles the engine once and reuses its warm caches for the
    rest. Spread one per worker, each of 8 processes compiles it at the same time: the same
    wall on the H200 (156.9 s against 159.1 s) for twice the summed test time
    (benchmarks/tests/2026-12-02-gpu-suite-balanced/)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    """'cuda' when present, else 'cpu' (kernels then run under TRITON_INTERPRET=1)."""
    return "cuda" if HAS_CUDA else "cpu"


def _compiled_variants() -> dict[str, int]:
    """Compiled variants of every Triton kernel of the `kernels` package loaded so far."""
    import sys

    from triton.runtime.jit import JITFunction

    out = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("kernels.") or mod is None:
            continue
        for fn in vars(mod).values():
            if isinstance(fn, JITFunction) and getattr(fn, "device_caches", None):
                n = sum(len(cache[0]) for cache in fn.device_caches.values())
                if n:
                    out[f"{fn.fn.__module__}.{fn.fn.__name__}"] = n
    return out


_COUNTS_DIR = "WORKBENCH_TRITON_COUNTS_DIR"  # where pytest-xdist workers leave their counts


_TEST_LOG: str | None = None  # --test-log, in the processes that write it


def pytest_addoption(parser):
    parser.addoption("--test-log", default=None, metavar="PATH",
                     help="append each test's outcome and seconds to PATH as it ends")


def pytest_configure(config):
    """On CUDA, in the controller of a pytest-xdist run: a folder for the workers' counts
    (workers inherit the environment when they start, after this hook). Whether this
    process writes --test-log lines (`pytest_runtest_logreport`; in a pytest-xdist run the
    workers do, not the controller, which receives the same reports)."""
    global _TEST_LOG
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        _TEST_LOG = config.getoption("--test-log")
    if HAS_CUDA and not hasattr(config, "workerinput") and _COUNTS_DIR not in os.environ:
        import tempfile

        os.environ[_COUNTS_DIR] = tempfile.mkdtemp(prefix="triton-counts-")


def pytest_sessionfinish(session):
    """In a pytest-xdist worker on CUDA: its compiled variants, for the controller."""
    worker = getattr(session.config, "workerinput", None)
    if HAS_CUDA and worker is not None and os.environ.get(_COUNTS_DIR):
        import json
        from pathlib import Path

        path = Path(os.environ[_COUNTS_DIR]) / f"{worker['workerid']}.json"
        path.write_text(json.dumps(_compiled_variants()))


def pytest_runtest_logreport(report):
    """With --test-log PATH (benchmarks/gpu_suite.sh): one line per test phase that ran or
    failed, "nodeid<TAB>phase<TAB>outcome<TAB>seconds", appended as it ends, so a run cut by
    a time limit still says which tests failed and where the time went (appends from
    pytest-xdist workers are single short writes)."""
    path = _TEST_LOG
    if path and (report.when == "call" or report.outcome != "passed"):
        with open(path, "a") as f:
            f.write(f"{report.nodeid}\t{report.when}\t{report.outcome}\t"
                    f"{report.duration:.2f}\n")


def pytest_terminal_summary(terminalreporter, config):
    """On CUDA: compiled variants per kernel, the measure of the gpu profile's buckets (under
    pytest-xdist: summed over workers, each of which compiles or loads its own)."""
    if not HAS_CUDA or hasattr(config, "workerinput"):
        return
    import json
    from collections import Counter
    from pathlib import Path

    counts = Counter(_compiled_variants())
    for path in sorted(Path(os.environ.get(_COUNTS_DIR, ".")).glob("gw*.json")):
        counts.update(json.loads(path.read_text()))
    terminalreporter.section("Triton kernels compiled")
    for name, n in sorted(counts.items()):
        terminalreporter.write_line(f"{n:5d}  {name}")
    terminalreporter.write_line(f"{sum(counts.values()):5d}  in all")
