"""The seam's interface, implemented for any namespace of the Python array API standard.

:class:`Arithmetic` is everything the stages ask of the numbers they compute with: arrays and
their conversion, machine epsilon, elementwise functions, the products of the forward pass, the
row-space factor behind the row reduction, the minimum-norm solve, extreme singular values and
the one rank tolerance, and how work may run in parallel. The methods here are written against
``self.xp`` and the standard's ``linalg`` extension only, so an array library that follows the
standard (array-api-strict in the tests, CuPy next) runs the construction through them as they
stand; the float64 CPU arithmetic (:mod:`construct.arith.cpu`) and mpmath
(:mod:`construct.arith.mp`) replace the kernels with LAPACK's and mpmath's.
"""

from __future__ import annotations

import operator

import contextlib
from dataclasses import dataclass

import numpy as np

# Iterative-refinement steps of the float64 readout (each: two triangular solves, two products).
REFINEMENT_STEPS = 4


@dataclass(frozen=True)
class RowRank:
    """The rank of a ``T``-row matrix and what decided it.

    Attributes:
        rank: numerical rank under :meth:`Arithmetic.rank_tol`.
        sigma_max, sigma_min: largest and ``T``-th singular values (0 when there are fewer).
        tol: the rank tolerance used.
    """

    rank: int
    sigma_max: float
    sigma_min: float
    tol: float


class Arithmetic:
    """Numbers for the construction: an array namespace and the kernels the stages need.

    Attributes:
        xp: the array namespace of the arrays it makes (``numpy`` for float64 and mpmath).
        bits: mantissa bits (53 for float64).
        weights_bits: what :attr:`construct.model.Weights.bits` records for weights made in it
            (None for float64).
        low: the float64 arithmetic beside it, for quantities that only need to be large enough
            (scales, norms, the scale search); itself for a float64 arithmetic.
        rounds_weights: see below.
    """

    bits = 53
    weights_bits: int | None = None
    # True when a kernel may return more digits than the arithmetic's own (mpmath's matrix
    # routines): the weights are rounded after the construction and the features recomputed.
    rounds_weights = False
    # Rows per pass over every head in the forward pass (construct.model.feature_matrix, and the
    # float64 certificate's enclosure), so that a block of contexts stays in cache from one head
    # to the next; None: all rows at once.
    cache_rows: int | None = None
    # Whether the forward pass (construct.model.feature_matrix) computes a group of heads by
    # products over the group at once (float64 on the CPU) rather than head by head: faster, and
    # rounded as BLAS's matrix kernels do. The construction's own features are head by head.
    batches_heads = False

    def __init__(self, xp, device=None, host_device=None):
        self.xp = xp
        self.device = device                # where arrays are made (None: the namespace's default)
        self.host_device = host_device      # what to_host moves an array to first, when not None
        self.low = self

    def __repr__(self) -> str:
        return f"<{self.name} arithmetic>"

    @property
    def name(self) -> str:
        return f"float64 ({getattr(self.xp, '__name__', self.xp)})"

    @property
    def eps(self) -> float:
        """Machine epsilon ``2^(1 − bits)``, twice the unit roundoff (``numpy.finfo(float64).eps`` for float64)."""
        return 2.0 ** (1 - self.bits)

    # -- execution ------------------------------------------------------------------------------

    def session(self):
        """Context for a whole construction (precision, thread policy)."""
        return self.working()

    def working(self):
        """Context in which this arithmetic's elementwise functions compute at its precision."""
        return contextlib.nullcontext()

    def heavy(self):
        """Context for a few large operations (a full factorization, a pass over every example)."""
        return contextlib.nullcontext()

    def rows(self, fn, n: int) -> list:
        """``fn(lo, hi)`` over a split of ``range(n)`` into row blocks, in order; the blocks may
        run in parallel, so ``fn`` must only read shared arrays and write its own rows."""
        return [fn(0, n)]

    # -- arrays ---------------------------------------------------------------------------------

    def asarray(self, x):
        """``x`` (host float64, or already this arithmetic's) as this arithmetic's array."""
        return self.xp.asarray(x, dtype=self.xp.float64, device=self.device)

    def constant(self, x: np.ndarray):
        """A host array of integers or booleans as this arithmetic's array."""
        return self.xp.asarray(x, device=self.device)

    def to_host(self, x) -> np.ndarray:
        """Nearest float64 values as a NumPy array (reports, and choices that need no more)."""
        return self.to_numpy(x).astype(np.float64, copy=False)

    def to_numpy(self, A) -> np.ndarray:
        """``A`` as a NumPy array holding the same numbers (what a weights file stores)."""
        if isinstance(A, np.ndarray):
            return A
        if self.host_device is not None:
            A = A.to_device(self.host_device)
        return np.from_dlpack(A).copy()

    def indices(self, x) -> np.ndarray:
        """Integer array ``x`` as host integers."""
        return self.to_numpy(x).astype(np.int64)

    def lowered(self, x):
        """``x`` in :attr:`low`'s arrays (itself, for a float64 arithmetic)."""
        return x if self.low is self else self.low.asarray(self.to_host(x))

    def scalar(self, x) -> float:
        return float(self.to_host(x))

    def zeros(self, shape):
        return self.xp.zeros(shape, dtype=self.xp.float64, device=self.device)

    def rounded(self, A):
        """``A`` rounded to this arithmetic's precision (a kernel may return extra digits)."""
        return A

    def copy(self, A):
        return self.xp.asarray(A, copy=True)

    def exp(self, A):
        return self.xp.exp(A)

    def log(self, A):
        return self.xp.log(A)

    def sqrt(self, A):
        return self.xp.sqrt(A)

    def ldexp(self, A, e):
        """``A · 2^e``, rounded once, as ``numpy.ldexp``: by products with powers of two of at
        most ``2^±1000`` (``2.0 ** e`` alone overflows past 1023 and is 0 below −1074). Upward
        the steps are exact until the result overflows. Downward the remainder goes first and
        then steps of ``2^−1000``: a step short of the last is exact while its result is normal,
        and where it is subnormal the exact result is below ``2^−2022`` and both are 0.

        ``e``: an integer, or (float arithmetics) host integers, a NumPy array broadcast against
        ``A``: each entry by its own exponent, in the same steps."""
        if isinstance(e, np.ndarray):
            return self._ldexp_each(A, e)
        e = operator.index(e)                                          # an integer, never truncated
        step = 1000 if e > 0 else -1000
        first = e - step * (abs(e) // 1000)
        A = A * 2.0 ** first                                           # a new array, also for e = 0
        for _ in range(min(abs(e) // 1000, 3)):     # three steps take any double to 0 or inf already
            A = A * 2.0 ** step
        return A

    def _ldexp_each(self, A, e: np.ndarray):
        """:meth:`ldexp` with an exponent per entry: one product with normal powers of two where
        every exponent allows it, otherwise the same steps, entry by entry."""
        e = e.astype(np.int64, casting="safe")                        # integers, never truncated
        if e.size == 0 or (e.min() >= -1022 and e.max() <= 1023):
            return A * self.asarray(np.ldexp(1.0, e))
        up, size = e > 0, np.abs(e)
        A = A * self.asarray(np.ldexp(1.0, np.where(up, size % 1000, -(size % 1000))))
        steps = size // 1000
        for k in range(min(int(steps.max()), 3)):
            A = A * self.asarray(np.ldexp(1.0, np.where(steps > k, np.where(up, 1000, -1000), 0)))
        return A

    # -- products -------------------------------------------------------------------------------

    def token_dot(self, E, w):
        """``E^(t) w^(t)`` for each example: ``E`` (T, n, d), ``w`` (T, d) → (T, n)."""
        return self.xp.matmul(E, w[:, :, None])[:, :, 0]

    def token_mix(self, E, s):
        """``E^(t)T s^(t)`` for each example: ``E`` (T, n, d), ``s`` (T, n) → (T, d)."""
        return self.xp.matmul(s[:, None, :], E)[:, 0, :]

    def head_values(self, Z, W_V):
        """``[W_V[h]^T z_h]_h`` for each example: ``Z`` (T, H·d), ``W_V`` (H, d, d_v) → (T, H·d_v)."""
        T = Z.shape[0]
        H, d, d_v = W_V.shape
        Zh = self.xp.permute_dims(self.xp.reshape(Z, (T, H, d)), (1, 0, 2))         # (H, T, d)
        out = self.xp.matmul(Zh, W_V)                                              # (H, T, d_v)
        return self.xp.reshape(self.xp.permute_dims(out, (1, 0, 2)), (T, H * d_v))

    def pick_tokens(self, E, j: np.ndarray):
        """``E^(t)`` row ``j[t]`` for each example (``j`` host integers), exactly."""
        one_hot = np.zeros(E.shape[:2])
        one_hot[np.arange(E.shape[0]), j] = 1.0
        return self.token_mix(E, self.asarray(one_hot))

    def vector_norm(self, A, axis=None):
        """Euclidean norms along ``axis`` (of all of ``A`` when None)."""
        return self.xp.sqrt(self.xp.sum(A * A, axis=axis))

    # -- linear algebra -------------------------------------------------------------------------

    def svdvals(self, A):
        """Singular values, descending."""
        return self.xp.linalg.svdvals(A)

    def rank_tol(self, sigma_max: float, shape: tuple[int, ...]) -> float:
        """The one rank tolerance, NumPy's ``matrix_rank`` convention: a singular value counts
        when it exceeds ``max(shape) · eps · σ_max``."""
        return max(shape) * self.eps * sigma_max

    def numerical_rank(self, A) -> tuple[int, np.ndarray]:
        """Rank of ``A`` under :meth:`rank_tol`, with its singular values (host, descending)."""
        s = self.to_host(self.svdvals(A)) if min(A.shape) else np.zeros(0)
        if s.size == 0:
            return 0, s
        return int(np.sum(s > self.rank_tol(s[0], A.shape))), s

    def smallest_singular_value(self, A) -> float:
        return float(self.to_host(self.svdvals(A))[-1])

    def spectral_norm(self, A) -> float:
        """``‖A‖_2`` as a host float."""
        if 0 in A.shape:
            return 0.0
        return float(self.to_host(self.svdvals(A))[0])

    def norm2(self, A) -> float:
        """``‖A‖_2`` (by singular values; see :meth:`spectral_norm` for the cheap form)."""
        return self.spectral_norm(A)

    def solve(self, A, B):
        """``A^{-1} B`` for square ``A``."""
        if B.ndim == 1:
            return self.xp.linalg.solve(A, B[:, None])[:, 0]
        return self.xp.linalg.solve(A, B)

    def qr_r(self, A):
        """``R`` of ``A = Q R`` (reduced: ``min(m, n) × n``)."""
        return self.xp.linalg.qr(A, mode="reduced").R

    def tri_solve(self, R, B, trans: bool = False):
        """``R^{-1} B`` (``R^{-T} B`` with ``trans``) for upper triangular ``R`` (generic: by LU)."""
        return self.solve(self.xp.matrix_transpose(R) if trans else R, B)

    def gram_solve(self, R, rhs):
        """``(R^T R)^{-1} rhs`` for upper triangular ``R``: two triangular solves."""
        return self.tri_solve(R, self.tri_solve(R, rhs, trans=True))

    def gram_solve_rows(self, A, rhs):
        """``(A A^T)^{-1} rhs`` for ``A`` of full row rank, by the QR of ``A^T``."""
        return self.gram_solve(self.qr_r(self.xp.matrix_transpose(A)), rhs)

    def prefix_times(self, Z, a: int, f: int, B):
        """``Z[:a, :f] @ B`` for ``B`` (f, k): the fitted rows' known features times ``B``."""
        return Z[:a, :f] @ B

    def times_prefix(self, C, Z, a: int, f: int):
        """``C @ Z[:a, :f]`` for ``C`` (k, a)."""
        return C @ Z[:a, :f]

    def householder(self, P):
        """Householder QR of ``P`` (k + p, k) whose first ``k`` rows are upper triangular:
        ``(R, Y, T)`` with ``P = (I − V T V^T) [R; 0]``, ``V = [I; Y]`` (see
        :func:`construct.arith.blocked.tp_update`). Generic: LAPACK's ``geqrf`` on the host (a
        panel is small)."""
        k = P.shape[1]
        h, tau = np.linalg.qr(self.to_host(P), mode="raw")
        h = h.T
        Y = h[k:]
        return self.asarray(np.triu(h[:k])), self.asarray(Y), self.asarray(compact_t(np, Y, tau))

    def min_norm_rows(self, E, ell):
        """Minimum-norm ``u^(t)`` with ``E^(t) u^(t) = ℓ^(t)``: ``E`` (m, n, d) of full row rank
        per example, ``ell`` (m, n) → (m, d)."""
        Q, R = self.xp.linalg.qr(self.xp.matrix_transpose(E))                     # E^T = Q R
        y = self.xp.linalg.solve(self.xp.matrix_transpose(R), ell[..., None])     # R^T y = ℓ
        return self.xp.matmul(Q, y)[..., 0]

    def inverse_gram_times(self, A, U):
        """``U^T (A^T A)^{-1}`` for ``A`` (d, m) of full column rank and ``U`` (m, d): (d, m)."""
        return self.xp.matrix_transpose(self.gram_solve_rows(self.xp.matrix_transpose(A), U))

    def complement(self, A):
        """Orthonormal columns spanning the orthogonal complement of ``A``'s columns, ``A``
        (d, m) of full column rank: (d, d − m), in float64."""
        Q = self.xp.linalg.qr(A, mode="complete").Q
        return Q[:, A.shape[1]:]

    def span_projector(self, A):
        """Orthonormal basis (d, m) of the span of ``A``'s columns, ``A`` (d, m) of full column rank."""
        return self.xp.linalg.qr(A, mode="reduced").Q

    def least_squares_residual(self, A, x) -> float:
        """``min_c ‖A c − x‖`` for ``A`` (d, m)."""
        if A.shape[1] == 0:
            return float(self.to_host(self.vector_norm(x, 0)))
        Q = self.span_projector(A)
        return float(self.to_host(self.vector_norm(x - Q @ (self.xp.matrix_transpose(Q) @ x), 0)))

    def row_reduction(self, Z, context=None):
        """The row-space factor of ``Z`` that the head loop grows: in float64 the blocked factor
        (:mod:`construct.arith.blocked`); otherwise refactorized per head
        (:class:`construct.arith.factor.GramRowReduction`).

        ``context``: the one context (n, d) every example shares, when they do; an arithmetic
        may then factor ``Z``'s coordinates in its row space (the CPU's, where ``2n ≤ d``)."""
        if self.bits == 53:
            from .blocked import BlockedRowFactor
            return BlockedRowFactor(Z, self)
        from .factor import GramRowReduction
        return GramRowReduction(Z, self)

    def min_norm_solve(self, Z, reduction, Y):
        """Minimum-norm ``B`` with ``Z B = Y`` (``Z`` of full row rank).

        Given the row reduction's ``R`` (``Z Z^T = R^T R``): ``B = Z^T R^{-1} R^{-T} Y`` (the
        semi-normal equations, which need no ``Q``), refined by iterative correction while the
        residual decreases: each step costs two triangular solves and two products with ``Z``,
        and brings the error from ``ε·cond(Z)²`` towards ``ε·cond(Z)``. Without one (a
        reduction that keeps no factor): ``Z^T (Z Z^T)^{-1} Y`` by a QR of ``Z^T``.
        """
        R = getattr(reduction, "R", None)
        Zt = self.xp.matrix_transpose(Z)
        if R is None:
            return Zt @ self.gram_solve_rows(Z, Y)

        def largest(r) -> float:
            return float(self.to_host(self.xp.max(self.xp.abs(r))))

        B = Zt @ self.gram_solve(R, Y)
        r = Y - Z @ B
        best = largest(r)
        for _ in range(REFINEMENT_STEPS):
            B_new = B + Zt @ self.gram_solve(R, r)
            r_new = Y - Z @ B_new
            err = largest(r_new)
            if err >= best:
                break
            B, r, best = B_new, r_new, err
        return B

    def row_rank(self, Z, reduction=None, overwrite: bool = False, sigma_above: float | None = None) -> RowRank:
        """Rank of ``Z`` (T rows) and its extreme singular values, from those of ``Z`` itself.
        ``overwrite``: the caller no longer needs ``Z`` (an arithmetic may factor it in place).
        ``sigma_above``: a value ``σ_min(Z)`` is expected to lie below; an arithmetic may use it
        to pick its method (never changing the result)."""
        T = Z.shape[0]
        rank, s = self.numerical_rank(Z)
        s_max = float(s[0]) if s.size else 0.0
        s_min = float(s[T - 1]) if s.size >= T else 0.0
        return RowRank(rank, s_max, s_min, float(self.rank_tol(s_max, Z.shape)))

    def positive_definite(self, G) -> bool:
        """Whether every matrix of the stack ``G`` is (numerically) positive definite."""
        return bool(np.all(self.to_host(self.xp.linalg.eigvalsh(G))[..., 0] > 0))

    def softmax_shift(self, logits):
        """A value per row subtracted from the logits before ``exp``: the row's maximum, so that
        no exponential overflows."""
        return self.xp.max(logits, axis=-1, keepdims=True)


def compact_t(xp, Y, tau, invert=None):
    """``T`` of the compact form ``I − V T V^T`` of the reflectors ``V = [I; Y]`` with factors
    ``tau``: upper triangular, ``T^{-1} = diag(1/τ) + triu(Y^T Y, 1)``. A zero ``τ`` is an
    identity reflector, whose ``y`` is zero: its row and column of ``T`` are zero.

    ``xp``: NumPy or CuPy (which have ``triu``); ``invert``: the inverse of an upper triangular
    matrix (default: by ``xp.linalg.solve``).
    """
    k = tau.shape[0]
    inv = xp.triu(Y.T @ Y, 1)
    idx = xp.arange(k)
    inv[idx, idx] = 1.0 / (tau + (tau == 0))
    T = invert(inv) if invert is not None else xp.triu(xp.linalg.solve(inv, xp.eye(k)))
    T[idx, idx] = tau
    return T
