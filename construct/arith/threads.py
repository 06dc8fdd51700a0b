"""CPU execution policy: BLAS thread pools and the construction's own two-thread split.

Only the CPU arithmetic (:mod:`construct.arith.cpu`) uses this module; stage code states what
may run in parallel (``Arithmetic.rows``) and never how.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from concurrent.futures import ThreadPoolExecutor, wait

import scipy
from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None


def _threadpools() -> ThreadpoolController:
    """The process's thread pools, inspected once (inspection scans every loaded library)."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller


def blas_threads() -> int:
    """Threads the BLAS libraries use now (the largest pool; 1 if none is found)."""
    pools = _threadpools().select(user_api="blas").lib_controllers
    return max([p.num_threads for p in pools] or [1])


def blas_limit(threads: int):
    """Context manager: BLAS runs on at most ``threads`` threads inside it.

    The construction runs its many small, skinny operations on one thread (on OpenBLAS two
    threads ran them 2-20x slower on the 2-core CI machine) and splits its passes over all
    examples in two halves on threads of its own (:func:`together`).
    """
    return _threadpools().limit(limits=threads, user_api="blas")


_pools_split: tuple[list, list] | None = None


def _split_pools() -> tuple[list, list]:
    """``(scipy's BLAS pools, every other BLAS pool)``, found once.

    Wheels of numpy and scipy each bundle their own OpenBLAS, with its own thread pool; scipy's
    is the one loaded from scipy's install (``scipy.libs``, ``scipy/.dylibs``). When none is
    (one BLAS shared by both, as from conda or a system package), every pool counts as scipy's.
    """
    global _pools_split
    if _pools_split is None:
        pools = _threadpools().select(user_api="blas").lib_controllers
        root = os.path.dirname(os.path.dirname(os.path.realpath(scipy.__file__)))
        mine = [p for p in pools if os.path.relpath(os.path.realpath(p.filepath), root).split(os.sep)[0]
                in ("scipy", "scipy.libs")]
        _pools_split = (mine, [p for p in pools if p not in mine]) if mine else (pools, [])
    return _pools_split


@contextlib.contextmanager
def scipy_threads(threads: int):
    """Context manager: BLAS and LAPACK called through scipy run on ``threads`` threads, every
    other BLAS pool (numpy's) on one.

    OpenBLAS's worker threads busy-wait for a while after each call. With two pools, a
    multi-threaded call in one while the other's workers still spin puts more threads than cores
    to work: on the 2-core CI machine a QR update ran 3x slower and a product gained nothing.
    So the heavy operations go through one pool only, scipy's (it has the LAPACK routines).
    """
    ours, others = _split_pools()
    saved = [(p, p.num_threads) for p in ours + others]
    try:
        for p in others:
            p.set_num_threads(1)
        for p in ours:
            p.set_num_threads(threads)
        yield
    finally:
        for p, n in saved:
            p.set_num_threads(n)


_helper: ThreadPoolExecutor | None = None


def _forget_helper() -> None:
    global _helper
    _helper = None                                  # a forked child has no helper thread: make a new one


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)


def together(first, second, parallel: bool) -> tuple:
    """``(first(), second())``, the first on a helper thread when ``parallel``.

    The construction's two-core parallelism: numpy's loops and products, and LAPACK routines
    that scipy wraps as thread-safe (``tpqrt``), release the GIL, so two of them take two
    cores, with BLAS on one thread (:func:`blas_limit`) so that no OpenBLAS worker busy-waits
    beside them. The work does not depend on ``parallel``: same seed, same bits, any core count.
    There is one helper thread, so ``first`` must not call :func:`together` itself.
    """
    global _helper
    if not parallel:
        return first(), second()
    if _helper is None:
        _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mha-construct")
    # In the caller's context: NumPy's error state (np.errstate) is a context variable, and the
    # helper's half of a pass must treat overflow as the caller's half does.
    pending = _helper.submit(contextvars.copy_context().run, first)
    try:
        out = second()
    finally:                                        # never leave the helper writing after an error
        wait([pending])
    return pending.result(), out


def halves(fn, n: int, parallel: bool) -> tuple:
    """``(fn(0, n // 2), fn(n // 2, n))``: a pass over ``n`` rows in two halves (:func:`together`)."""
    mid = n // 2
    return together(lambda: fn(0, mid), lambda: fn(mid, n), parallel)


def row_blocks(lo: int, hi: int, step: int | None):
    """``(a, b)`` blocks of at most ``step`` rows covering ``lo..hi−1`` in order (one block when
    ``step`` is None). A last block of one row joins the one before: NumPy sends a one-row
    product to a matrix–vector kernel, whose rounding differs from the matrix–matrix one that
    the same rows get in a larger block."""
    step = max(1, step or hi - lo)
    edges = list(range(lo, hi, step)) + [hi]
    if len(edges) > 2 and edges[-1] - edges[-2] == 1:
        del edges[-2]
    return list(zip(edges[:-1], edges[1:]))
