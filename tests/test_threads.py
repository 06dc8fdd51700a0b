"""BLAS thread limits when the engine runs in threads other than the main one.

OpenBLAS's thread count is one setting for the whole process, and threadpoolctl (from 3.8 on)
lets one Python thread at a time change it: the engine must neither keep that control after it
returns nor lose its own limit to it, or a build in a worker thread runs BLAS on more threads and
gives other weights from the same seed.
"""

import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from construct import build, feature_matrix, forward, synthetic
from construct.arith.threads import blas_limit


def _blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def _in_threads(*fns) -> list:
    """Run each function on a thread of its own, all started together; their results in order."""
    out = [None] * len(fns)
    errors = []
    start = threading.Barrier(len(fns))

    def run(i, fn):
        try:
            start.wait()
            out[i] = fn()
        except BaseException as e:                  # re-raised in the test's thread
            errors.append(e)

    workers = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return out


DATA = synthetic("independent", T=57, n=8, d=16, seed=0)          # H = 8 at capacity


def _weights() -> bytes:
    return build(DATA, 8, seed=0, precision="float64").weights.to_bytes()


@pytest.fixture(scope="module")
def reference() -> bytes:
    """The weights of a build in the main thread, with no limit of anyone else's open."""
    return _weights()


@pytest.fixture(params=["as found", "a user's limit of 2, held by the main thread"])
def blas_setting(request, reference):
    """BLAS as the process has it, or on two threads by a limit the main thread holds meanwhile
    (which, from threadpoolctl 3.8 on, makes that thread the one allowed to change it: the
    reference is built before it is entered, so the main thread still holds it when the
    workers build)."""
    if request.param == "as found":
        yield
    else:
        with threadpool_limits(2, user_api="blas"):
            yield


def test_a_build_in_a_worker_thread_gives_the_main_threads_weights(reference, blas_setting):
    (worker,) = _in_threads(_weights)
    assert worker == reference


def test_builds_running_at_once_in_two_threads_give_the_same_weights(reference, blas_setting):
    assert _in_threads(_weights, _weights) == [reference, reference]


def test_the_limits_and_their_control_are_given_back():
    before = _blas_threads()
    _weights()
    _in_threads(_weights, _weights)
    assert _blas_threads() == before

    def limit_in_a_thread():                         # a user's own limit, from another thread
        with threadpool_limits(1, user_api="blas"):
            return _blas_threads()

    (inside,) = _in_threads(limit_in_a_thread)
    assert set(inside) == {1}
    assert _blas_threads() == before


def _counts_in_child() -> list[int]:
    return _blas_threads()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX start method")
def test_a_process_forked_while_another_thread_holds_a_limit_gets_the_counts_back():
    """The thread that opened the limit does not exist in the child, so its limit never closes
    there: the child must not keep BLAS on one thread for good."""
    before = _blas_threads()
    opened, release = threading.Event(), threading.Event()

    def hold():
        with blas_limit(1):
            opened.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert opened.wait(60)
        assert set(_blas_threads()) == {1}
        with multiprocessing.get_context("fork").Pool(1) as pool:
            child = pool.apply_async(_counts_in_child).get(timeout=60)
    finally:
        release.set()
        holder.join()
    assert child == before
    assert _blas_threads() == before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX start method")
def test_a_process_forked_after_the_engine_returned_keeps_the_counts_of_the_moment():
    """A review: the counts saved when the engine's first limit opened outlived its last one, and
    every forked child was set back to them, over a user's limit of the moment."""
    _weights()
    with threadpool_limits(1, user_api="blas"):
        with multiprocessing.get_context("fork").Pool(1) as pool:
            child = pool.apply_async(_counts_in_child).get(timeout=60)
    assert set(child) == {1}


def _open_a_limit_with(monkeypatch, set_threads) -> None:
    """Open and close a limit of one thread while counts are set by ``set_threads``, which
    raises KeyboardInterrupt (a Ctrl-C) somewhere; then the real setter again."""
    from construct.arith import threads
    real = threads._set_threads
    monkeypatch.setattr(threads, "_set_threads", set_threads)
    with pytest.raises(KeyboardInterrupt):
        with blas_limit(1):
            pass
    monkeypatch.setattr(threads, "_set_threads", real)


def test_a_limit_that_fails_to_open_is_not_left_open(monkeypatch):
    """A review: an error (or Ctrl-C) while a limit was being set left it in the table for good,
    and every later request was held to one thread."""
    from construct.arith import threads

    def interrupted(pool, count):
        raise KeyboardInterrupt

    with threadpool_limits(2, user_api="blas"):          # (so that the limit has something to set)
        before = _blas_threads()
        _open_a_limit_with(monkeypatch, interrupted)
        assert _blas_threads() == before
        with threads.scipy_threads(2):
            inside = _blas_threads()
    assert max(inside) == 2                          # scipy's pool: not held to one thread


def test_a_limit_interrupted_while_closing_gives_the_counts_back_at_the_next_one(monkeypatch):
    """A review: Ctrl-C while the counts were being given back forgot them, and every later
    request took one thread for what BLAS had before."""
    from construct.arith import threads
    real = threads._set_threads

    def interrupted_when_giving_back(pool, count):
        if count != 1:
            raise KeyboardInterrupt
        real(pool, count)

    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        _open_a_limit_with(monkeypatch, interrupted_when_giving_back)
        with threads.scipy_threads(threads.outside_threads()):
            inside = _blas_threads()
        after = _blas_threads()
    assert max(inside) == 2 and after == before


def test_a_library_limited_per_thread_beside_a_process_wide_one_leaves_it_as_it_was(monkeypatch):
    """A review: threadpoolctl's own (per-thread) limit, taken for OpenBLAS on OpenMP, gave every
    library back the count it had seen on entry, after the engine's table had lowered the others."""
    from construct.arith import threads
    pools = [p["filepath"] for p in threadpool_info() if p["user_api"] == "blas"]
    if len(pools) < 2:
        pytest.skip("needs two BLAS libraries (numpy's and scipy's wheels)")
    monkeypatch.setattr(threads, "_per_thread", lambda pool: pool.filepath == pools[0])
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        with blas_limit(1):
            assert set(_blas_threads()) == {1}
        assert _blas_threads() == before


def test_a_check_that_starts_during_another_threads_build_gets_every_thread_once_it_ends():
    """A request is sized by the counts outside the engine's limits, not by another thread's
    limit of one that happens to be open when it starts."""
    from construct.arith import threads
    opened, release, closed = threading.Event(), threading.Event(), threading.Event()

    def build_elsewhere():
        with blas_limit(1):
            opened.set()
            release.wait(60)
        closed.set()

    with threadpool_limits(2, user_api="blas"):
        holder = threading.Thread(target=build_elsewhere)
        holder.start()
        try:
            assert opened.wait(60)
            with threads.scipy_threads(threads.outside_threads()):
                release.set()
                assert closed.wait(60)
                inside = _blas_threads()
        finally:
            release.set()
            holder.join()
    assert max(inside) == 2


def test_a_session_on_the_helper_thread_does_not_wait_on_itself():
    """A review: a session opened inside another session's half of a pass (on the helper thread)
    split its own pass in two and queued half of it behind itself, for ever."""
    script = textwrap.dedent("""
        from construct.arith import FLOAT64
        from construct.arith import threads
        threads.outside_threads = lambda: 2                 # the two-thread split, on any machine
        def part(lo, hi):
            with FLOAT64.session():
                return sum(FLOAT64.rows(lambda a, b: b - a, hi - lo))
        with FLOAT64.session():
            print(FLOAT64.rows(part, 8))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[4, 4]", done.stderr


def test_sessions_overlapping_in_two_threads_leave_the_shared_arithmetic_as_it_was():
    """A review: FLOAT64 (one instance for the process) kept a session's two-thread split and
    thread count after two sessions overlapped in two threads, so a later heavy step outside any
    session ignored a user's limit of one thread."""
    from construct.arith import FLOAT64
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with FLOAT64.session():
            first_in.set()
            second_in.wait(60)
        first_out.set()

    def second():
        first_in.wait(60)
        with FLOAT64.session():
            second_in.set()
            first_out.wait(60)

    _in_threads(first, second)
    assert FLOAT64.parallel is False
    with threadpool_limits(1, user_api="blas"), FLOAT64.heavy():
        assert set(_blas_threads()) == {1}


def test_the_forward_pass_gives_the_same_bits_whatever_blas_threads_it_finds():
    # The forward pass takes the heads in groups, by products whose rounding depends on how many
    # threads BLAS splits them over: outside a session, forward gave other last bits with BLAS on
    # one thread than on two (T = 301, H = 20, 8e-15). It runs its pass in the arithmetic's
    # session (BLAS on one thread, the rows in two fixed halves), as verify always did.
    data = synthetic("independent", T=301, n=16, d=24, seed=1)
    weights = build(data, 20, seed=0).weights
    with threadpool_limits(limits=1):
        one = forward(data.E, data.X, weights), feature_matrix(data.E, data.X, weights, layered=True)
    with threadpool_limits(limits=2):
        two = forward(data.E, data.X, weights), feature_matrix(data.E, data.X, weights, layered=True)
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1])
