"""A replica's running requests as a struct of arrays (one row per request slot), and its
KV pool as a count of free token slots. `prefilling` lists, in admission order, the admitted
slots whose prompt is not fully prefilled yet (chunked prefill).

Two views of each request are kept apart, as in an overlap engine: the GPU's (`seq`
committed KV tokens, `gen` tokens generated, updated when a round is launched) and the
host's (`host_seq`, `emitted`, updated when the round's results are processed). `epoch`
changes whenever a slot is released, so results that arrive for a slot's previous occupant
are recognized and skipped.
"""

from __future__ import annotations

import numpy as np


class SlotTable:
    """Request slots of one replica and its KV pool."""

    INT_FIELDS = ("rid", "epoch", "need", "prefilled", "seq", "host_seq", "reserved", "gen",
                  "emitted", "out", "rounds", "commit_sum")

    def __init__(self, n_slots: int, capacity_tokens: int):
        for name in self.INT_FIELDS:
            setattr(self, name, np.zeros(n_slots, dtype=np.int64))
        self.rid[:] = -1
        self.active = np.zeros(n_slots, dtype=bool)
        self.ready = np.zeros(n_slots, dtype=bool)
        self.last_emit = np.zeros(n_slots)
        self.free_slots = list(range(n_slots - 1, -1, -1))
        self.prefilling: list[int] = []
        self.releases = 0  # slots released so far: unchanged means every epoch is too
        self.capacity = capacity_tokens
        self.kv_free = capacity_tokens
        self.n_active = 0

    @property
    def kv_used(self) -> int:
        return self.capacity - self.kv_free

    def decode_rows(self) -> np.ndarray:
        """Slots whose prompt is fully prefilled, in slot order."""
        return np.flatnonzero(self.active & self.ready)

    def occupy(self, rid: int, prompt: int, out: int, emitted: int, last_emit: float) -> int:
        """Admit request `rid`; a preempted one recomputes prompt + emitted tokens."""
        slot = self.free_slots.pop()
        self.rid[slot] = rid
        self.active[slot] = True
        self.ready[slot] = False
        self.need[slot] = prompt + emitted
        self.gen[slot] = self.emitted[slot] = emitted
        self.out[slot] = out
        self.last_emit[slot] = last_emit
        self.prefilled[slot] = self.seq[slot] = self.host_seq[slot] = self.reserved[slot] = 0
        self.rounds[slot] = self.commit_sum[slot] = 0
        self.n_active += 1
        self.prefilling.append(slot)
        return slot

    def release(self, slots: np.ndarray) -> None:
        """Free the slots and every KV token they hold."""
        self.kv_free += int(self.reserved[slots].sum())
        self.reserved[slots] = 0
        self.active[slots] = False
        self.ready[slots] = False
        self.rid[slots] = -1
        self.epoch[slots] += 1
        self.free_slots.extend(np.asarray(slots).tolist()[::-1])
        self.n_active -= len(slots)
        self.releases += len(slots)

    def victims(self, rows: np.ndarray, excess: int, need: np.ndarray,
                prompt: np.ndarray) -> np.ndarray:
        """Rows to retract so that `excess` KV tokens come free, as SGLang orders them:
        fewest generated tokens first, then longest prompt. `need` is each row's
        reservation for the next round. Empty if even all rows would not suffice."""
        order = np.lexsort((-prompt, self.emitted[rows]))
        freed = np.cumsum(need[order])
        k = int(np.searchsorted(freed, excess))
        return rows[order[: k + 1]] if k < len(rows) else rows[:0]
