"""`workbench reproduce`: the papers' tables and figures against the workbench: the command
(cli.py), the published data (data.py), one entry per table or figure (entry.py), the
simulator's side (sim.py)."""
