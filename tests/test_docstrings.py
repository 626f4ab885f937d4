"""Docstrings and comments of library code say what the code does and why, never when it was
measured: no dates or run names (those live in the benchmark READMEs), and every
`package/...py` path they cite exists.

Docstrings are read with ast (every bare string statement: module, class, function and
attribute docstrings); comments with tokenize. String literals the code uses are not read.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ("common", "kernels", "reference", "simulator", "workbench", "toy", "experiments")
PATH_ROOTS = (*PACKAGES, "tests")
DATED = re.compile(r"20\d\d-\d\d-\d\d|h200-20\d\d", re.IGNORECASE)
PY_PATH = re.compile(r"(?<![\w/.*<>-])((?:" + "|".join(PATH_ROOTS) + r")/[a-z0-9_/]*\.py)\b")


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment in `path`."""
    source = path.read_text()
    out = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source, str(path)))
           if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
           and isinstance(node.value.value, str)]
    out += [(tok.start[0], tok.string) for tok in
            tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return out


def _problems(path: Path, root: Path = ROOT) -> list[str]:
    bad = []
    rel = path.relative_to(root)
    for line, text in _texts(path):
        bad += [f"{rel}:{line}: dated '{m.group(0)}'" for m in DATED.finditer(text)]
        bad += [f"{rel}:{line}: no such file {m.group(1)}" for m in PY_PATH.finditer(text)
                if not (root / m.group(1)).is_file()]
    return bad


def test_library_docstrings_and_comments_carry_no_dates_or_dead_paths():
    bad = [p for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
           for p in _problems(path)]
    assert bad == []


def test_the_checker_sees_dates_run_names_and_dead_paths(tmp_path):
    """The reader itself: docstrings and comments are read, code strings are not."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "real.py").write_text("")
    mod = tmp_path / "kernels" / "mod.py"
    mod.write_text('"""See kernels/real.py and kernels/gone.py."""\n'
                   'X = 1  # timed on 2026-01-02\n'
                   'def f():\n    """Run h200-2026b."""\n'
                   '    return "2026-01-02 kernels/none.py kernels/<op>/kernel.py"\n')
    assert _problems(mod, tmp_path) == [
        "kernels/mod.py:1: no such file kernels/gone.py",
        "kernels/mod.py:4: dated 'h200-2026'",
        "kernels/mod.py:2: dated '2026-01-02'",
    ]
