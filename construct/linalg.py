"""Numerical helpers shared by every stage: the one rank tolerance, extreme singular values.

Rank decisions in this codebase go through :func:`rank_tol` only, the convention of
``numpy.linalg.matrix_rank``: a singular value counts as non-zero when it exceeds
``max(shape) * eps * sigma_max``.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import scipy
import scipy.linalg as sla
import scipy.sparse.linalg as spla
from threadpoolctl import ThreadpoolController

from . import precision
from .enclose import gamma

EPS = float(np.finfo(np.float64).eps)

# Below this size a dense SVD of the triangular factor is cheap; above, Lanczos (ARPACK).
_DENSE_SVD_LIMIT = 600

# row_factor keeps the Cholesky factor of the Gram matrix only while the rounding of forming and
# factoring it moves σ_min(Z)² by at most this fraction (σ_min(Z) to about 5e-7, relative).
GRAM_SLACK = 1e-6
# Rows of Z that row_factor looks at first, to skip a Gram matrix that would be rejected.
_PROBE_ROWS = 256


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
    pending = _helper.submit(first)
    try:
        out = second()
    finally:                                        # never leave the helper writing after an error
        wait([pending])
    return pending.result(), out


def halves(fn, n: int, parallel: bool) -> tuple:
    """``(fn(0, n // 2), fn(n // 2, n))``: a pass over ``n`` rows in two halves (:func:`together`)."""
    mid = n // 2
    return together(lambda: fn(0, mid), lambda: fn(mid, n), parallel)


def tri_solve(R: np.ndarray, rhs: np.ndarray, trans: str = "N") -> np.ndarray:
    """``R^{-1} rhs`` (or ``R^{-T} rhs`` with ``trans="T"``) for upper-triangular ``R``.

    No finiteness scan: callers pass arrays the engine computed (inputs are validated once, at
    the door). Keep ``R`` in Fortran order to avoid a copy per call.
    """
    return sla.solve_triangular(R, rhs, trans=trans, check_finite=False)


def gram_solve(R: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(R^T R)^{-1} rhs``: with ``R`` from ``A^T = Q R`` this is ``(A A^T)^{-1} rhs``."""
    return tri_solve(R, tri_solve(R, rhs, trans="T"))


def rank_tol(sigma_max, shape: tuple[int, ...], eps: float = EPS):
    """The rank tolerance for a matrix of ``shape`` whose largest singular value is ``sigma_max``.

    ``eps`` is the unit roundoff of the precision the matrix was computed in (float64 by default).
    """
    return max(shape) * eps * sigma_max


def spectral_norm(A: np.ndarray) -> float:
    """``‖A‖_2`` in float64, from the eigenvalues of the smaller Gram matrix (the largest is well conditioned)."""
    A = precision.to_float(A)
    if A.size == 0:
        return 0.0
    G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
    return float(np.sqrt(max(np.linalg.eigvalsh(G)[-1], 0.0)))


def numerical_rank(A: np.ndarray) -> tuple[int, np.ndarray]:
    """Rank of ``A`` under :func:`rank_tol` at ``A``'s precision, with its singular values (descending)."""
    s = precision.svdvals(A)
    if s.size == 0:
        return 0, s
    return int(np.sum(s > rank_tol(s[0], A.shape, precision.of(A).eps))), s


def triangular_extremes(R: np.ndarray) -> tuple[float, float]:
    """Largest and smallest singular values of an upper-triangular square ``R``.

    ``R`` is the triangular factor of ``Z^T = Q R``, so these are the extreme singular values of
    ``Z``. Small ``R``: dense SVD. Large ``R``: Lanczos on ``R^T R`` and, through two triangular
    solves per step, on ``(R^T R)^{-1}``; a deterministic start vector keeps runs reproducible.
    Returns ``sigma_min = 0`` when ``R`` has a zero on its diagonal.
    """
    m = R.shape[0]
    if m == 0:
        return 0.0, 0.0
    if m <= _DENSE_SVD_LIMIT:
        s = sla.svdvals(R, check_finite=False)
        return float(s[0]), float(s[-1])
    if np.any(np.diag(R) == 0):
        return float(sla.norm(R, 2)), 0.0
    v0 = np.ones(m) / np.sqrt(m)
    R = np.asfortranarray(R)
    # scipy's BLAS for the products too, so that one thread pool does all the work (scipy_threads)
    trmv, trsv = sla.blas.dtrmv, sla.blas.dtrsv
    gram = spla.LinearOperator((m, m), matvec=lambda v: trmv(R, trmv(R, v), trans=1), dtype=np.float64)
    inv = spla.LinearOperator((m, m), matvec=lambda v: trsv(R, trsv(R, v, trans=1)), dtype=np.float64)
    with scipy_threads(blas_threads()):
        lam_max = spla.eigsh(gram, k=1, which="LA", v0=v0, return_eigenvectors=False)[0]
        inv_max = spla.eigsh(inv, k=1, which="LA", v0=v0, return_eigenvectors=False)[0]
    return float(np.sqrt(lam_max)), float(1.0 / np.sqrt(inv_max))


def qr_r(A: np.ndarray) -> np.ndarray:
    """The triangular factor ``R``, shape ``(min(p, m), m)``, of the QR of ``A`` (p, m), any shape."""
    p, m = A.shape
    if p == 0 or m == 0:
        return np.zeros((min(p, m), m))
    # LAPACK's geqrf through scipy (one thread pool with the rest: scipy_threads), with the
    # workspace it asks for (blocked, as fast as numpy.linalg.qr)
    lwork = int(sla.lapack.dgeqrf_lwork(p, m)[0])
    qr = sla.lapack.dgeqrf(A, lwork=lwork)[0]
    return np.triu(qr[:min(p, m)])


def row_factor(Z: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """Upper-triangular ``R`` (T, T) with ``R^T R = Z Z^T`` for ``Z`` (T, k), ``T ≤ k``, and the
    extreme singular values ``(σ_max, σ_min)`` of ``Z``.

    Tries the Cholesky factor of the Gram matrix first (about a third of a QR of ``Z^T``), and
    keeps it only when rounding provably cannot matter: forming ``Z Z^T`` moves it by at most
    ``γ_k ‖Z‖_F²`` and Cholesky by at most ``γ_{T+1} ‖R‖_F²`` (Higham, Thm 10.3, in 2-norm), so
    by Weyl ``σ_min(R)²`` is within ``δ`` of ``σ_min(Z)²``; accepted when ``δ ≤ GRAM_SLACK ·
    σ_min(R)²``. Otherwise (ill-conditioned ``Z``, Cholesky breakdown) the QR of ``Z^T``.
    Two cheap tests skip the Gram when it would be rejected anyway: a few rows of ``Z`` (before
    forming it) and a condition estimate (before the extremes).
    """
    T, k = Z.shape
    with scipy_threads(blas_threads()):             # every large operation in scipy's BLAS
        if 0 < T <= k and _gram_may_do(Z):
            G = sla.blas.dsyrk(1.0, np.ascontiguousarray(Z).T, trans=1)   # upper triangle of Z Z^T
            trace = float(np.trace(G))
            try:
                R = sla.cholesky(G, lower=False, overwrite_a=True, check_finite=False)
            except np.linalg.LinAlgError:
                R = None
            if R is not None and np.all(np.isfinite(R)):
                delta = gamma(k) * trace + gamma(T + 1) * float(np.einsum("ij,ij->", R, R))
                # Cheap rejection first: LAPACK's estimate is a lower bound on ‖R^{-1}‖_1, so
                # σ_min(R) ≤ sqrt(T) / estimate = sqrt(T) · rcond · ‖R‖_1.
                rcond, _ = sla.lapack.dtrcon(R, norm="1")
                if delta <= GRAM_SLACK * T * (rcond * np.abs(R).sum(axis=0).max()) ** 2:
                    s_max, s_min = triangular_extremes(R)
                    if delta <= GRAM_SLACK * s_min**2:
                        return R, (s_max, s_min)
        R = qr_r(Z.T)
        return R, triangular_extremes(R) if R.shape[0] == R.shape[1] else (0.0, 0.0)


def _gram_may_do(Z: np.ndarray) -> bool:
    """False when ``Z``'s Gram factor would fail :func:`row_factor`'s test (it only picks the method).

    The Gram matrix of a subset of rows is a principal submatrix of ``Z Z^T``, so its smallest
    eigenvalue bounds ``σ_min(Z)²`` from above (Cauchy interlacing), and the rounding term ``δ``
    is ``(γ_k + γ_{T+1}) ‖Z‖_F²`` up to rounding.
    """
    T, k = Z.shape
    if T <= _PROBE_ROWS:
        return True
    probe = Z[:: T // _PROBE_ROWS][:_PROBE_ROWS]
    upper = float(np.linalg.eigvalsh(probe @ probe.T)[0])
    delta = (gamma(k) + gamma(T + 1)) * float(np.einsum("ij,ij->", Z, Z))
    return GRAM_SLACK * upper >= delta
