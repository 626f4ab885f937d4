"""The bottom layer: pure stdlib + numpy rules that several packages share.

One home for each: the tolerance table and the 2x rule (`numerics`), round-up and batch/token
buckets (`buckets`), survival-curve identities (`survival`), DSpark's verify-length scheduler
(`dspark_schedule`), the provenance stamp of result files (`stamps`) and the one table of
method names both engine layers use (`methods`). Every package may import it; it imports
none of them, nor torch, triton, simpy or hydra.
"""
