"""Float64 on the CPU: NumPy arrays, LAPACK through SciPy, and the CPU's execution policy.

The construction runs its many small, skinny operations with BLAS on one thread and splits its
passes over all examples in two halves on two threads of its own (:mod:`construct.arith.threads`);
the few large operations (the final factorization, verification) run in SciPy's BLAS pool alone.
None of this changes a bit of the results: same seed, same weights, on any number of cores.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

from . import lapack, threads
from .base import Arithmetic, RowRank
from .lapack import EPS


class NumpyArithmetic(Arithmetic):
    """What float64 and mpmath share: NumPy arrays (``float64`` or ``object`` of mpmath
    numbers) and NumPy's contractions, whose summation order the weights' bits depend on."""

    def __init__(self):
        super().__init__(np)

    def to_host(self, x) -> np.ndarray:
        # float64 arrays as they are (no copy of a whole dataset to read it), as the base class does
        return np.asarray(x).astype(np.float64, copy=False)

    def copy(self, A):
        return A.copy()                 # C order, whatever A's layout: BLAS's rounding depends on it

    def constant(self, x: np.ndarray):
        return np.asarray(x)

    def to_numpy(self, A) -> np.ndarray:
        return np.asarray(A)

    def token_dot(self, E, w):
        return np.einsum("tnd,td->tn", E, w)

    def token_mix(self, E, s):
        return np.einsum("tnd,tn->td", E, s)

    def head_values(self, Z, W_V):
        T = Z.shape[0]
        H, d, _ = W_V.shape
        return np.einsum("thd,hdv->thv", Z.reshape(T, H, d), W_V).reshape(T, -1)

    def pick_tokens(self, E, j: np.ndarray):
        return E[np.arange(E.shape[0]), j]

    def complement(self, A):
        Q, _ = np.linalg.qr(self.to_host(A), mode="complete")
        return Q[:, A.shape[1]:]


class Float64(NumpyArithmetic):
    """IEEE-754 double precision on the CPU (NumPy, SciPy's LAPACK)."""

    # 256 contexts of n = 32, d = 64 are 4 MB: the forward pass at H = 256 took about 2.1 s
    # instead of 2.6 s over whole halves (T = 7937, two threads, median of three).
    cache_rows = 256
    batches_heads = True

    def __init__(self):
        super().__init__()
        # A session's state belongs to the thread that opened it: FLOAT64 is one instance for the
        # process, and sessions of two threads may overlap.
        self._session = threading.local()

    @property
    def parallel(self) -> bool:
        """Whether this thread's session splits its passes in two halves on two threads."""
        return getattr(self._session, "parallel", False)

    @property
    def _threads(self) -> int:
        """BLAS threads found when this thread's session started (0 outside a session)."""
        return getattr(self._session, "threads", 0)

    @property
    def name(self) -> str:
        return "float64"

    @property
    def eps(self) -> float:
        return EPS

    # -- execution ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def session(self):
        """BLAS on one thread for the construction's many small operations, and the passes over
        all examples in two halves on two threads when BLAS had more than one."""
        state = self._session
        saved = self.parallel, self._threads
        state.threads = threads.outside_threads()
        state.parallel = state.threads > 1
        try:
            with threads.blas_limit(1):
                yield self
        finally:
            state.parallel, state.threads = saved

    def heavy(self):
        """SciPy's BLAS pool with every thread (as many as BLAS had), NumPy's pool on one."""
        return threads.scipy_threads(self._threads or threads.outside_threads())

    def rows(self, fn, n: int) -> list:
        return list(threads.halves(fn, n, self.parallel))

    # -- arrays ---------------------------------------------------------------------------------

    def asarray(self, x):
        return np.asarray(x, dtype=np.float64)

    def zeros(self, shape):
        return np.zeros(shape)

    def rounded(self, A):
        return np.asarray(A, dtype=np.float64)

    def vector_norm(self, A, axis=None):
        return np.linalg.norm(A, axis=axis)

    # -- linear algebra -------------------------------------------------------------------------

    def svdvals(self, A):
        return lapack.svdvals(A)

    def smallest_singular_value(self, A) -> float:
        return float(np.linalg.svd(A, compute_uv=False)[-1])

    def spectral_norm(self, A) -> float:
        """``‖A‖_2`` from the largest eigenvalue of the smaller Gram matrix (well conditioned)."""
        A = self.to_host(A)
        if A.size == 0:
            return 0.0
        G = A @ A.T if A.shape[0] <= A.shape[1] else A.T @ A
        return float(np.sqrt(max(np.linalg.eigvalsh(G)[-1], 0.0)))

    def norm2(self, A) -> float:
        return float(np.linalg.norm(A, 2))

    def solve(self, A, B):
        return np.linalg.solve(A, B)

    def qr_r(self, A):
        return lapack.qr_r(A)

    def tri_solve(self, R, B, trans: bool = False):
        return lapack.tri_solve(R, B, trans="T" if trans else "N")

    def gram_solve(self, R, rhs):
        return lapack.gram_solve(R, rhs)

    def gram_solve_rows(self, A, rhs):
        return lapack.gram_solve(lapack.qr_r(A.T), rhs)

    def min_norm_rows(self, E, ell):
        Q, R = np.linalg.qr(np.swapaxes(E, 1, 2))           # E^T = Q R, Q (m, d, n), R (m, n, n)
        y = np.linalg.solve(np.swapaxes(R, 1, 2), ell[..., None])  # R^T y = ℓ
        return (Q @ y)[..., 0]

    def inverse_gram_times(self, A, U):
        _, R = np.linalg.qr(A)
        # (A^T A)^{-1} = R^{-1} R^{-T}, so the result's transpose is R^{-1} R^{-T} U.
        return lapack.gram_solve(R, U).T

    def span_projector(self, A):
        return np.linalg.qr(A)[0]

    def least_squares_residual(self, A, x) -> float:
        if A.shape[1] == 0:
            return float(np.linalg.norm(x))
        coef, *_ = np.linalg.lstsq(A, x, rcond=None)
        return float(np.linalg.norm(x - A @ coef))

    def row_reduction(self, Z, context=None):
        from .factor import CoordinateFactor, RowSpaceFactor
        # The coordinates save 1 − n/d of each product and cost n/d of Z in memory: taken where
        # they at least halve the work.
        if context is not None and 2 * context.shape[0] <= context.shape[1]:
            Q, _ = np.linalg.qr(context.T)                      # (d, n): the context's row space
            return CoordinateFactor(Z, Q, self.parallel)
        return RowSpaceFactor(Z, self.parallel)

    def row_rank(self, Z, reduction=None, overwrite: bool = False, sigma_above: float | None = None) -> RowRank:
        """Rank of ``Z`` (T rows): from the row reduction's ``R`` when given (``R^T R = Z Z^T``),
        else from a fresh factor (:func:`construct.arith.lapack.row_factor`, which ``sigma_above``
        may spare a Gram matrix); from the singular values of ``Z`` when it has fewer columns
        than rows."""
        T = Z.shape[0]
        if Z.shape[1] < T:
            return super().row_rank(Z)
        if reduction is None:
            # Norms and Gram entries of Z square its size: far from 1, factor 2^-e Z (exact),
            # whose singular values are Z's times 2^-e.
            e = _exponent_far_from_one(Z)
            if e:
                Z = np.ldexp(Z, -e, out=Z if overwrite else None)
                sigma_above = None if sigma_above is None else math.ldexp(sigma_above, -e)
            R, (s_max, s_min) = lapack.row_factor(Z, sigma_above)
            with np.errstate(over="ignore"):                # beyond float64: inf, and no rank
                s_max, s_min = float(np.ldexp(s_max, e)), float(np.ldexp(s_min, e))
        else:
            R = reduction.R
            s_max, s_min = lapack.triangular_extremes(R, lapack.EXTREMES_TOL)
        tol = self.rank_tol(s_max, Z.shape)
        # σ_min(Z) > tolerance ⇔ all T singular values count: rank Z = T.
        rank = T if s_min > tol else self.numerical_rank(R)[0]
        return RowRank(rank, s_max, s_min, tol)

    def positive_definite(self, G) -> bool:
        try:
            np.linalg.cholesky(G)
        except np.linalg.LinAlgError:
            return False
        return True


def _exponent_far_from_one(Z: np.ndarray) -> int:
    """The binary exponent of ``max |Z|`` where it lies beyond ``2^±256`` (0 otherwise, and for a
    zero or non-finite ``Z``). From ``max Z`` and ``min Z``: ``|Z|`` would be a copy of ``Z``
    (1 GB at H = 256, n = 32, d = 64, and a second of the 25 s that ``verify`` takes there)."""
    top = max(float(np.max(Z, initial=0.0)), -float(np.min(Z, initial=0.0)))
    e = math.frexp(top)[1] if math.isfinite(top) and top > 0 else 0
    return e if abs(e) > 256 else 0

