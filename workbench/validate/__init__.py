"""`workbench validate`: engine runs on the GPU against the simulator's predictions (cli.py), the
report (report.py) and its per-request diagnosis (diag.py)."""
