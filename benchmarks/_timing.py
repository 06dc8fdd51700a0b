"""Helpers shared by the benchmark scripts (run them as ``python benchmarks/<script>.py``): the
timing, and the option types that refuse bad values in argparse's one line, before any work."""

from __future__ import annotations

import argparse
import math
import time


def positive(text: str) -> int:
    """A command-line integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A command-line number of seconds, finite and above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def triple(text: str) -> tuple[int, int, int]:
    """``H,n,d``: three positive integers."""
    parts = text.split(",")
    try:
        if len(parts) != 3:
            raise argparse.ArgumentTypeError("")
        return tuple(positive(v) for v in parts)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected H,n,d (three positive integers), got {text!r}") from None


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
