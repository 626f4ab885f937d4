"""Device-to-device and device-to-host relays of the overlap engine.

`FutureMap` (docs/sglang.md 5.1) keeps, per request row, the newest
committed length and anchor token on the device. Every step publishes into it on the forward
stream right after accept (before KV injection), and the next round gathers its
`prefix_lens` and `verified_id` from it on the same stream, so round k+1 can be launched
before the host has read round k. Row 0 is the padding row: padded batch rows read and write
zeros there.

`ResultCopy` moves each step's `(commit_len, tokens...)` rows into pinned host buffers on the
copy stream, after the step's publish fence, and hands back a `HostResult` the host waits on
when it wants the numbers (one step later in overlap mode). On the CPU the copy is immediate.
"""

from __future__ import annotations

import torch

from reference.device import Fence, Streams, host_buffer


class FutureMap:
    """seq_lens (R,) i64 and bonus (R,) i64 on the device, indexed by request row."""

    def __init__(self, rows: int, device: torch.device):
        self.seq_lens = torch.zeros(rows, dtype=torch.int64, device=device)
        self.bonus = torch.zeros(rows, dtype=torch.int64, device=device)

    def publish(self, rows: torch.Tensor, seq_lens: torch.Tensor, bonus: torch.Tensor) -> None:
        """rows (n,) i64; seq_lens, bonus (n,) i64 (zeros on padding rows, which are row 0)."""
        self.seq_lens.index_copy_(0, rows, seq_lens)
        self.bonus.index_copy_(0, rows, bonus)

    def resolve(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(verified_id, prefix_lens), each (n,) i64, of rows (n,) i64."""
        return self.bonus[rows], self.seq_lens[rows]

    def peek(self, rows: list[int]) -> list[int]:
        """Committed lengths of `rows` read to the host (a sync on CUDA; for checks only)."""
        return self.seq_lens[rows].tolist()


class HostResult:
    """One step's results on their way to pinned host memory.

    view: (n, w) i64 host tensor; begin, done: fences around the copy on the copy stream.
    """

    def __init__(self, view: torch.Tensor, begin: Fence, done: Fence, source: torch.Tensor):
        self.view, self.begin, self.done = view, begin, done
        self._source = source  # keeps the device tensor alive until the copy is read
        self.read = False

    def wait(self) -> list[list[int]]:
        """Block until the copy is done and return the rows as lists."""
        self.done.synchronize()
        self.read, self._source = True, None
        return self.view.tolist()


class DirectResult:
    """One step's results read straight from the device (sync mode: no copy stream, no
    staging); begin and done are the step's publish fence, for the timeline."""

    def __init__(self, packed: torch.Tensor, published: Fence):
        self._packed, self.begin, self.done = packed, published, published
        self.read = False

    def wait(self) -> list[list[int]]:
        """Block until the step is done (the read follows it on the stream) and return the
        rows as lists."""
        self.read = True
        return self._packed.tolist()


class ResultCopy:
    """A ring of pinned buffers of max_rows * width i64, filled on the copy stream.

    Two buffers suffice: the host reads step k-1 before it launches step k+1.
    """

    def __init__(self, streams: Streams, device: torch.device, max_rows: int, width: int,
                 depth: int = 2):
        self.streams, self.capacity = streams, max_rows * width
        self.buffers = [host_buffer(self.capacity, device) for _ in range(depth)]
        self.owners: list[HostResult | None] = [None] * depth
        self.next = 0

    def start(self, packed: torch.Tensor, after: Fence) -> HostResult:
        """Copy packed (n, w) i64 once `after` has passed on the forward stream."""
        n, w = packed.shape
        if n * w > self.capacity:
            raise ValueError(f"{n}x{w} results exceed the {self.capacity}-entry host buffer")
        i, self.next = self.next, (self.next + 1) % len(self.buffers)
        owner = self.owners[i]
        if owner is not None and not owner.read:
            raise RuntimeError("host result buffer reused before it was read")
        s = self.streams
        view = self.buffers[i][: n * w].view(n, w)
        with s.on(s.copy):
            after.wait(s.copy)
            begin = s.fence(timing=True)
            view.copy_(packed, non_blocking=True)
            done = s.fence(timing=True)
        s.hand_over(packed, s.copy)
        self.owners[i] = HostResult(view, begin, done, packed)
        return self.owners[i]
