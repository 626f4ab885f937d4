"""Continuous-batching serving on the reference engine, with SGLang's Spec V2 overlap.

    from reference.serve import ClosedLoop, ServeConfig, make_requests, serve
    out = serve(target, ClosedLoop(make_requests(prompts, 128), concurrency=8),
                proposer=proposer, config=ServeConfig(mode="overlap"))

`loop.py` is the loop (sync and overlap modes) and says what is fenced by what;
`scheduler.py` the host's request state, admission, chunked prefill and lag bounds;
`relay.py` the device FutureMap and the pinned result copies; `workload.py` closed-loop and
timed arrivals; `timeline.py` the Chrome trace and device idle time.
"""

from reference.serve.loop import ServeConfig, Server, ServeResult, serve
from reference.serve.workload import (
    ClosedLoop,
    OpenLoop,
    ServeRequest,
    make_requests,
    poisson_arrivals,
)

__all__ = ["ClosedLoop", "OpenLoop", "ServeConfig", "ServeRequest", "ServeResult", "Server",
           "make_requests", "poisson_arrivals", "serve"]
