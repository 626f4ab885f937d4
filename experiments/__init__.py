"""Scripts that reproduce the papers' figures and tables, each with its committed outputs.

Run one as `python -m experiments.<name>` (experiments/README.md lists them); they read the
committed zoo and prompt sets under experiments/ relative to the repository root, and write
next to them. Nothing imports this package.
"""
