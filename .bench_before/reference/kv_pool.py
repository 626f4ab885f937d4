"""Paged KV pool: a request-to-slot table, per-layer K/V storage and a slot allocator.

As in SGLang: `req_to_token[R, W]` int32 maps (request row, position) -> KV slot, the
target's and the drafter's K/V live in separate per-layer pools `[L, S, nkv, D]` indexed by
the same slots, and slot 0 / row 0 are reserved padding (padded batch rows and out-of-range
block positions read and write there, harmlessly). The pool is sized from a memory budget
like SGLang's `mem_fraction_static`: mem_fraction * device memory minus what is already
allocated (the weights). Requests reserve slots ahead of use and free them all at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference.device import to_device


class PoolFullError(RuntimeError):
    """The pool cannot hold a request (too few free slots, rows, or table width)."""


@dataclass(frozen=True)
class KVShape:
    """Per-slot K/V geometry of one model: L layers of nkv heads of dim D."""

    num_layers: int
    num_kv_heads: int
    head_dim: int

    def bytes_per_slot(self, dtype: torch.dtype) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype.itemsize


class KVPool:
    """Target (and optional draft) K/V pools sharing one slot space and one table.

    Attributes:
        req_to_token: (R+1, W) int32; row 0 is the all-zero padding row.
        k, v: (L, S, nkv, D) target pools; draft_k, draft_v: (Ld, S, nkvd, Dd) or None.
    """

    def __init__(self, num_slots: int, max_requests: int, context_len: int, target: KVShape,
                 draft: KVShape | None, dtype: torch.dtype, device: torch.device | str):
        self.num_slots, self.context_len = num_slots, context_len
        self.target_shape, self.draft_shape = target, draft
        self.req_to_token = torch.zeros(max_requests + 1, context_len, dtype=torch.int32,
                                        device=device)
        self.k, self.v = self._pools(target, dtype, device)
        self.draft_k, self.draft_v = self._pools(draft, dtype, device) if draft else (None, None)
        self._free_slots = list(range(num_slots - 1, 0, -1))
        self._free_rows = list(range(max_requests, 0, -1))
        self._row_slots: dict[int, list[int]] = {}

    def _pools(self, shape: KVShape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        size = (shape.num_layers, self.num_slots, shape.num_kv_heads, shape.head_dim)
        # Zeroed: masked-out keys are multiplied by 0 in attention, so they must be finite.
        return (torch.zeros(size, dtype=dtype, device=device),
                torch.zeros(size, dtype=dtype, device=device))

    @classmethod
    def from_budget(cls, mem_fraction: float, max_requests: int, context_len: int,
                    target: KVShape, draft: KVShape | None, dtype: torch.dtype,
                    device: torch.device | str) -> KVPool:
        """Size the pool from mem_fraction * device memory minus what is allocated now,
        capped at the max_requests * context_len slots the table can address."""
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError("from_budget needs a CUDA device; give num_slots on the CPU")
        total = torch.cuda.get_device_properties(device).total_memory
        budget = int(total * mem_fraction) - torch.cuda.memory_allocated(device)
        per_slot = target.bytes_per_slot(dtype) + (draft.bytes_per_slot(dtype) if draft else 0)
        # never more than the table can address
        num_slots = min(budget // per_slot, max_requests * context_len + 1)
        if num_slots < 2:
            raise PoolFullError(f"mem_fraction={mem_fraction} leaves {budget / 2**30:.2f} GiB "
                                f"for the KV pool, less than two slots of {per_slot} bytes")
        return cls(num_slots, max_requests, context_len, target, draft, dtype, device)

    @property
    def free_slots(self) -> int:
        return len(self._free_slots)

    def can_hold(self, draft: KVShape | None, max_requests: int, context_len: int) -> bool:
        return (draft in (None, self.draft_shape) and self.req_to_token.shape[0] > max_requests
                and self.context_len >= context_len)

    def admit(self, num_tokens: int) -> int:
        """Take a request row with slots for positions [0, num_tokens); return the row."""
        if not self._free_rows:
            raise PoolFullError(f"no free request row (pool has {self.req_to_token.shape[0] - 1})")
        row = self._free_rows.pop()
        self._row_slots[row] = []
        try:
            self.reserve(row, num_tokens)
        except PoolFullError:
            self.release(row)
            raise
        return row

    def reserve(self, row: int, num_tokens: int) -> None:
        """Make sure positions [0, num_tokens) of `row` have slots (never shrinks)."""
        self.reserve_many([row], [num_tokens])

    def reserve_many(self, rows: Sequence[int], num_tokens: Sequence[int]) -> None:
        """`reserve` for several rows at once, with one asynchronous write to the table."""
        grow = [(row, n, n - len(self._row_slots[row])) for row, n in zip(rows, num_tokens)]
        grow = [g for g in grow if g[2] > 0]
        if not grow:
            return
        for _, n, _ in grow:
            if n > self.context_len:
                raise PoolFullError(f"request needs {n} positions, the table width "
                                    f"(context_len) is {self.context_len}")
        total = sum(need for _, _, need in grow)
        if total > len(self._free_slots):
            who = "request needs" if len(grow) == 1 else f"{len(grow)} requests need"
            raise PoolFullError(f"{who} {total} more KV slots, {len(self._free_slots)} "
                                f"of {self.num_slots - 1} are free; lower the batch or "
                                "raise mem_fraction")
        index: list[list[int]] = [[], [], []]  # table rows, columns, slots
        for row, n, need in grow:
            new = self._free_slots[-need:][::-1]
            del self._free_slots[-need:]
            owned = self._row_slots[row]
            index[0] += [row] * need
            index[1] += range(len(owned), n)
            index[2] += new
            owned.extend(new)
        rows_t, cols, slots = to_device(index, self.req_to_token.device).unbind(0)
        self.req_to_token.index_put_((rows_t, cols), slots.to(torch.int32))

    def reserved(self, row: int) -> int:
        """Positions [0, n) of `row` have slots; returns n."""
        return len(self._row_slots[row])

    def release(self, row: int) -> None:
        """Free every slot of `row` and the row itself."""
        slots = self._row_slots.pop(row)
        self._free_slots.extend(reversed(slots))
        self.req_to_token[row, : len(slots)] = 0
        self._free_rows.append(row)

    def close(self) -> None:
        """Drop the pool tensors now (before a replacement pool is allocated)."""
        self.k = self.v = self.draft_k = self.draft_v = None

    def check(self) -> None:
        """Assert that no slot is owned twice or both owned and free, and none is lost."""
        owned = [s for slots in self._row_slots.values() for s in slots]
        everything = owned + self._free_slots
        if len(set(owned)) != len(owned):
            raise AssertionError("a KV slot is owned by two live requests")
        if len(set(everything)) != len(everything) or 0 in everything:
            raise AssertionError("a KV slot is both owned and free, or slot 0 was handed out")
        if len(everything) != self.num_slots - 1:
            raise AssertionError(f"{self.num_slots - 1 - len(everything)} KV slots were lost")
