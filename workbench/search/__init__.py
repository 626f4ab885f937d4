"""`workbench simulate` with a config search: the conditional search space and objectives
(space.py), the best configurations of a multirun (report.py)."""
