"""The serving catalog's mutations against the test files that covered their code before
tests/mutation/catalog_serving.py and its tests were written (the same tree, each
mutation's own tests replaced by OLD[its area]). Run from the repository root:

    python benchmarks/tests/2026-12-03-mutation-serving/before.py OUT
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tests.mutation import runner

OLD = {
    "serve-": ["tests/reference/test_serving.py", "tests/reference/test_serving_rules.py"],
    "sim-": ["tests/simulator/test_anchors.py", "tests/simulator/test_reservation.py",
             "tests/simulator/test_conservation.py", "tests/simulator/test_verify_schedule.py"],
    "loader-": ["tests/reference/test_model.py", "tests/reference/test_fused_qk.py"],
    "model-": ["tests/reference/test_model.py", "tests/reference/test_fused_qk.py"],
    "tree-round-": ["tests/reference/test_tree.py", "tests/reference/test_tree_verify.py"],
    "lookup-anchor": ["tests/reference/test_prompt_lookup.py"],
    "lookup-commit": ["tests/reference/test_prompt_lookup.py"],
}


def main(out: Path) -> None:
    from tests.mutation.catalog_serving import MUTATIONS

    chosen = []
    for m in runner.load(MUTATIONS):
        old = next((t for prefix, t in OLD.items() if m.name.startswith(prefix)), None)
        if old is not None:
            chosen.append(replace(m, tests=tuple(old)))
    outcomes = runner.run(chosen, timeout_s=400.0, baseline=False)
    runner.write_report(outcomes, out, {"command": "python " + " ".join(sys.argv[:1]) + " OUT",
                                        "rev": None, "profile": "ci"})
    s = runner.summary(outcomes)
    print(f"killed {s['killed']} of {s['ran']}; survived: {s['survived']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
