"""Where the serving loop's requests come from: a closed loop of clients, or timed arrivals.

`ClosedLoop(requests, concurrency)` keeps `concurrency` requests in the system: the first ones
arrive at time 0, and each finish (as the host sees it) releases the next request at that
moment. `OpenLoop(requests)` releases each request at its own `arrival_s` (a trace, or
`poisson_arrivals`). Times are seconds of the loop's clock: wall time, or the iteration count
under the deterministic `steps` clock the tests use.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ServeRequest:
    """One request: `rid` also indexes the oracle proposer's streams."""

    rid: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_s: float = 0.0


def make_requests(prompts: Sequence[Sequence[int]], max_new_tokens: int | Sequence[int],
                  arrivals: Sequence[float] | None = None) -> list[ServeRequest]:
    """Requests 0..n-1 from prompts, one max_new_tokens or one per request, arrival times."""
    n = len(prompts)
    news = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
    times = [0.0] * n if arrivals is None else list(arrivals)
    if not len(news) == len(times) == n:
        raise ValueError("prompts, max_new_tokens and arrivals must have the same length")
    return [ServeRequest(i, tuple(p), m, t) for i, (p, m, t) in enumerate(zip(prompts, news,
                                                                            times))]


def poisson_arrivals(rate: float, n: int, seed: int = 0) -> list[float]:
    """n arrival times (seconds) of a Poisson process of `rate` requests per second."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


class OpenLoop:
    """Requests released at their arrival_s, whatever the server does."""

    def __init__(self, requests: Sequence[ServeRequest]):
        self.requests = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
        self._queue = deque(self.requests)

    def due(self, now: float) -> list[ServeRequest]:
        """Pop every request that has arrived by `now`."""
        out = []
        while self._queue and self._queue[0].arrival_s <= now:
            out.append(self._queue.popleft())
        return out

    def next_arrival(self) -> float | None:
        return self._queue[0].arrival_s if self._queue else None

    def on_finish(self, request: ServeRequest, now: float) -> None:
        """Called when the host sees `request` finish."""


class ClosedLoop(OpenLoop):
    """`concurrency` clients; each sends its next request when its previous one finishes."""

    def __init__(self, requests: Sequence[ServeRequest], concurrency: int):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        ordered = sorted(requests, key=lambda r: r.rid)
        super().__init__([replace(r, arrival_s=0.0) for r in ordered[:concurrency]])
        self._later = deque(ordered[concurrency:])
        self.requests = ordered

    def on_finish(self, request: ServeRequest, now: float) -> None:
        if self._later:
            self._queue.append(replace(self._later.popleft(), arrival_s=now))
