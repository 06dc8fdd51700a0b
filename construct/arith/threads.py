"""CPU execution policy: BLAS thread pools and the construction's own two-thread split.

Only the CPU arithmetic (:mod:`construct.arith.cpu`) uses this module; stage code states what
may run in parallel (``Arithmetic.rows``) and never how.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import scipy
from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None
_controller_lock = threading.Lock()


def _threadpools() -> ThreadpoolController:
    """The process's thread pools, inspected once (inspection scans every loaded library)."""
    global _controller
    with _controller_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        return _controller


def _blas_pools() -> list:
    return _threadpools().select(user_api="blas").lib_controllers


# The BLAS thread counts, for the whole process. OpenBLAS (with its own threads, as in the numpy
# and scipy wheels) has one setting and one pool of workers per library for every thread of the
# process, and threadpoolctl (from 3.8 on) lets one Python thread at a time change it: a thread
# that sets it outside a threadpoolctl context keeps that right as long as it lives, and the
# others' settings are ignored meanwhile. So the engine does not hand its limits to threadpoolctl
# one thread at a time. Each of its contexts files a request (the threads it wants per library);
# while any request is open, each library runs on the fewest threads any of them asks for, and
# when the last one closes, every library gets back the count it had before the first opened.
# Two builds in two threads therefore keep BLAS on one thread until both are done, and a build
# in a worker thread gets its limit while the main thread holds a threadpoolctl limit of its own.
_policy_lock = threading.Lock()
_requests: dict[int, tuple[int, dict[str, int]]] = {}     # token → (thread ident, {library: threads})
_baseline: dict[str, int] = {}         # the counts before the first open request, until given back
_tokens = itertools.count()


def _set_threads(pool, threads: int) -> None:
    """Set ``pool``'s thread count from this thread, whichever thread threadpoolctl lets do so
    now, and leave that right to nobody afterwards (another thread may take it between the two
    steps: the caller checks the count)."""
    give_back = getattr(type(pool), "clear_controlling_thread", None)      # threadpoolctl >= 3.8
    if give_back is not None:
        give_back(force=True)
    try:
        pool.set_num_threads(threads)
    finally:
        if give_back is not None:
            give_back()


def _per_thread(pool) -> bool:
    """Whether ``pool``'s limit belongs to the thread that sets it (OpenBLAS built on OpenMP)."""
    return getattr(pool, "internal_api", None) == "openblas" and getattr(pool, "threading_layer", None) == "openmp"


def _apply() -> None:
    """Give each library the count the open requests call for, or with none open the count it
    had before (``_policy_lock`` held). Every library is tried; the first error is raised after."""
    failed = None
    for pool in _blas_pools():
        if _per_thread(pool):
            continue
        wanted = [want[pool.filepath] for _, want in _requests.values() if pool.filepath in want]
        threads = min(wanted) if wanted else _baseline.get(pool.filepath)
        try:
            for _ in range(3):                     # another thread may take threadpoolctl's control
                if threads is None or pool.num_threads == threads:
                    break
                _set_threads(pool, threads)
        except BaseException as exc:                # (Ctrl-C included) the other libraries first
            failed = failed or exc
    if failed is not None:
        raise failed


def _close(token: int) -> None:
    """Close a request (``_policy_lock`` held). After the last, the counts from before come back,
    and are forgotten only once they have: an interrupted give-back is finished by the next."""
    _requests.pop(token, None)
    _apply()
    if not _requests:
        _baseline.clear()


@contextlib.contextmanager
def _request(threads_of):
    """Context manager: BLAS runs on at most ``threads_of(library)`` threads per library while it
    is open, however many threads of the process open requests meanwhile. A library whose limit
    belongs to each thread (OpenBLAS on OpenMP) is limited in this thread alone, by threadpoolctl."""
    token = next(_tokens)
    with contextlib.ExitStack() as local:
        try:
            with _policy_lock:
                pools = _blas_pools()
                if not _requests and not _baseline:          # (kept: a give-back was interrupted)
                    _baseline.update({p.filepath: p.num_threads for p in pools if not _per_thread(p)})
                _requests[token] = (threading.get_ident(),
                                    {p.filepath: threads_of(p) for p in pools if not _per_thread(p)})
                _apply()
            # One library per limit, given as a count: threadpoolctl before 3.8 ignores limits
            # keyed by file path. It restores what it selected only.
            for pool in pools:
                if _per_thread(pool):
                    local.enter_context(_threadpools().select(filepath=pool.filepath).limit(limits=threads_of(pool)))
            yield
        finally:
            with _policy_lock:
                _close(token)


def _counts_now() -> int:
    return max([p.num_threads for p in _blas_pools()] or [1])


def blas_threads() -> int:
    """Threads the BLAS libraries use now (the largest pool; 1 if none is found)."""
    with _policy_lock:
        return _counts_now()


def outside_threads() -> int:
    """Threads the BLAS libraries use outside the engine's limits: while one is open (in any
    thread), the counts from before the first opened; otherwise the counts now. What the engine
    sizes its own requests by, so that a check that starts during another thread's build still
    gets every thread once that build is done."""
    with _policy_lock:
        if _baseline:
            return max(_baseline.values())
        return _counts_now()


def blas_limit(threads: int):
    """Context manager: BLAS runs on at most ``threads`` threads inside it.

    The construction runs its many small, skinny operations on one thread (on OpenBLAS two
    threads ran them 2-20x slower on the 2-core CI machine) and splits its passes over all
    examples in two halves on threads of its own (:func:`together`).
    """
    return _request(lambda pool: threads)


_pools_split: tuple[list, list] | None = None


def _split_pools() -> tuple[list, list]:
    """``(scipy's BLAS pools, every other BLAS pool)``, found once.

    Wheels of numpy and scipy each bundle their own OpenBLAS, with its own thread pool; scipy's
    is the one loaded from scipy's install (``scipy.libs``, ``scipy/.dylibs``). When none is
    (one BLAS shared by both, as from conda or a system package), every pool counts as scipy's.
    """
    global _pools_split
    if _pools_split is None:
        pools = _blas_pools()
        root = os.path.dirname(os.path.dirname(os.path.realpath(scipy.__file__)))
        mine = [p for p in pools if os.path.relpath(os.path.realpath(p.filepath), root).split(os.sep)[0]
                in ("scipy", "scipy.libs")]
        _pools_split = (mine, [p for p in pools if p not in mine]) if mine else (pools, [])
    return _pools_split


def scipy_threads(threads: int):
    """Context manager: BLAS and LAPACK called through scipy run on ``threads`` threads, every
    other BLAS pool (numpy's) on one.

    OpenBLAS's worker threads busy-wait for a while after each call. With two pools, a
    multi-threaded call in one while the other's workers still spin puts more threads than cores
    to work: on the 2-core CI machine a QR update ran 3x slower and a product gained nothing.
    So the heavy operations go through one pool only, scipy's (it has the LAPACK routines).
    While a build holds BLAS on one thread in another thread, they run on one thread too.
    """
    ours = {p.filepath for p in _split_pools()[0]}
    return _request(lambda pool: threads if pool.filepath in ours else 1)


def _before_fork() -> None:
    _policy_lock.acquire()                          # no fork while the table is half updated


def _after_fork_in_parent() -> None:
    _policy_lock.release()


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: requests of the others will never close."""
    global _policy_lock, _controller_lock
    _policy_lock, _controller_lock = threading.Lock(), threading.Lock()
    me = threading.get_ident()
    gone = [t for t, (ident, _) in _requests.items() if ident != me]
    for token in gone:
        _close(token)


_helper: ThreadPoolExecutor | None = None
_on_helper = threading.local()


def _mark_helper() -> None:
    _on_helper.yes = True


def _forget_helper() -> None:
    global _helper
    _helper = None                                  # a forked child has no helper thread: make a new one


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def together(first, second, parallel: bool) -> tuple:
    """``(first(), second())``, the first on a helper thread when ``parallel``.

    The construction's two-core parallelism: numpy's loops and products, and LAPACK routines
    that scipy wraps as thread-safe (``tpqrt``), release the GIL, so two of them take two
    cores, with BLAS on one thread (:func:`blas_limit`) so that no OpenBLAS worker busy-waits
    beside them. The work does not depend on ``parallel``: same seed, same bits, any core count.
    There is one helper thread: called on it (a session opened inside a half of a pass), both
    run there in turn, since a second half queued behind the first would wait for ever.
    """
    global _helper
    if not parallel or getattr(_on_helper, "yes", False):
        return first(), second()
    if _helper is None:
        _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mha-construct",
                                     initializer=_mark_helper)
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
