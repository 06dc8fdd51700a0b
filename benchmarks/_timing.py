"""Timing helper shared by the benchmark scripts (run them as ``python benchmarks/<script>.py``)."""

from __future__ import annotations

import time


def interleaved(fns, repeat: int):
    """For each of ``fns``: the smallest wall time over ``repeat`` rounds that call them in turn,
    and its last result (a slow spell of the machine falls on every function alike)."""
    times, outs = [[] for _ in fns], [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            outs[i] = fn()
            times[i].append(time.perf_counter() - t)
    return [(min(ts), out) for ts, out in zip(times, outs)]
