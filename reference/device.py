"""Device-side ordering for the engine: fences, streams and host<->device copies that never block.

A `Fence` is a CUDA event on the GPU; on the CPU, where every op has finished when its call
returns, it only stamps the host clock, so the same engine code runs on both (the CPU path is
the synchronous fallback). `Streams` names the three streams of the overlap engine
(docs/sglang.md 5.1): `forward` (the current stream: all model work),
`plan` (KV allocation and table writes, fenced by the previous step's verify-done) and `copy`
(results to pinned host memory). `to_device` stages host values in pinned memory so the copy
is asynchronous; a plain `torch.tensor(values, device="cuda")` would wait for the stream.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch


class Fence:
    """A point on a device stream: a CUDA event, or the host clock on the CPU.

    Args:
        cuda: whether the work it marks runs on a CUDA device.
        timing: record a timestamp (CUDA events without timing are cheaper to wait on).
    """

    def __init__(self, cuda: bool, timing: bool = True):
        self.event = torch.cuda.Event(enable_timing=timing) if cuda else None
        self.host_s: float | None = None

    def record(self, stream: torch.cuda.Stream | None = None) -> Fence:
        """Mark the current end of `stream` (default: the current stream); returns self."""
        if self.event is None:
            self.host_s = time.perf_counter()
        else:
            self.event.record(stream)
        return self

    def wait(self, stream: torch.cuda.Stream | None) -> None:
        """Make later work on `stream` wait for this fence, on the device (the host goes on)."""
        if self.event is not None and stream is not None:
            stream.wait_event(self.event)

    def synchronize(self) -> None:
        """Block the host until the fenced work is done (a no-op on the CPU)."""
        if self.event is not None:
            self.event.synchronize()

    def seconds_since(self, earlier: Fence) -> float:
        """Device seconds from `earlier` to this fence (both recorded and, on CUDA, done)."""
        if self.event is None:
            return self.host_s - earlier.host_s
        return earlier.event.elapsed_time(self.event) / 1e3


class Streams:
    """The forward, plan and copy streams of one device (all None on the CPU). Without
    `side_streams` (sync serving: nothing overlaps) planning and copies run on the forward
    stream itself (plan and copy are None)."""

    def __init__(self, device: torch.device, side_streams: bool = True):
        self.cuda = device.type == "cuda"
        side = self.cuda and side_streams
        self.forward = torch.cuda.current_stream(device) if self.cuda else None
        self.plan = torch.cuda.Stream(device) if side else None
        self.copy = torch.cuda.Stream(device) if side else None

    def on(self, stream: torch.cuda.Stream | None):
        """Context manager that makes `stream` current (nothing on the CPU)."""
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def fence(self, stream: torch.cuda.Stream | None = None, timing: bool = False) -> Fence:
        """A fence recorded now on `stream` (default: the current stream)."""
        return Fence(self.cuda, timing).record(stream)

    def hand_over(self, tensor: torch.Tensor, stream: torch.cuda.Stream | None) -> None:
        """Tell the caching allocator that `tensor` is also used on `stream`."""
        if self.cuda and stream is not None:
            tensor.record_stream(stream)


def to_device(values: Sequence[int] | torch.Tensor, device: torch.device,
              dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Host values -> a tensor on `device`, copied asynchronously on the current stream.

    On CUDA the values go through pinned memory, whose caching allocator keeps the staging
    block alive until the copy is done, so the host never waits for the stream.
    """
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    host = host.to(dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def host_buffer(numel: int, device: torch.device, dtype: torch.dtype = torch.int64
                ) -> torch.Tensor:
    """A flat host buffer for device->host copies: pinned when `device` is CUDA."""
    return torch.empty(numel, dtype=dtype, pin_memory=device.type == "cuda")
