"""`workbench calibrate`: time the engine's pieces on the GPU (gpu.py), fit the cost
tables (fit.py), the command line (cli.py)."""
