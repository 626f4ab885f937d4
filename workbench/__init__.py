"""DFlash Workbench: shared core (config schemas, numerics, timing, results I/O) and the CLI.

Run `python -m workbench --help` for the commands. torch is imported lazily, only by the
commands that drive the GPU reference, so the simulator path stays torch-free.
"""

__version__ = "0.1.0"
