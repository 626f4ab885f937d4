"""A small mutation runner: realistic single-line bugs, each run against its targeted tests.

`python -m tests.mutation` applies every mutation of catalog.py, one at a time, to a
temporary copy of the tree and runs the tests the mutation names (`pytest -x -q` under a time
limit): a failing run kills the mutation, a passing one lets it survive. See runner.py for the
catalog format and __main__.py for the command line.
"""
