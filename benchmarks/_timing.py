"""Timing helper shared by the benchmark scripts (run them as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import time


# OpenBLAS's worker threads busy-wait up to about 0.1 s after a call; a pause before each timing
# keeps one measured call's workers from slowing the next.
_SETTLE_S = 0.25


def interleaved(fns, repeat: int):
    """For each of ``fns``: the smallest wall time over ``repeat`` rounds that call them in turn,
    and its last result (a slow spell of the machine falls on every function alike)."""
    times, outs = [[] for _ in fns], [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            time.sleep(_SETTLE_S)
            t = time.perf_counter()
            outs[i] = fn()
            times[i].append(time.perf_counter() - t)
    return [(min(ts), out) for ts, out in zip(times, outs)]
