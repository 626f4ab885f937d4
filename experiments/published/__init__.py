"""The simulator against published third-party serving results (`python -m
experiments.published`): engine profiles fitted on no-speculation columns, every speculative
cell predicted from its tau; see __main__.py and report.md."""
