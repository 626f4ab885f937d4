"""`gemv`: the public launcher (kernel.py) over shared.py, split_k.py, launch.py and the
tuner (tune.py, tuning.py); oracle (ref.py), benchmark (bench.py)."""
