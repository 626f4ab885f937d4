"""`workbench serve-bench`: the serving loop, sync vs overlap, over a concurrency sweep (bench.py),
and its tables (report.py)."""
