"""LAPACK and BLAS through SciPy, for the float64 CPU arithmetic and its row-space factor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla

from ..enclose import gamma
from .threads import outside_threads, scipy_threads

EPS = float(np.finfo(np.float64).eps)

# Below this size a dense SVD of the triangular factor is cheap; above, Lanczos (ARPACK).
_DENSE_SVD_LIMIT = 600

# row_factor keeps the Cholesky factor of the Gram matrix only while σ_min(Z)² is known to within
# this fraction (σ_min(Z) to about 5e-7, relative): either because the rounding of forming and
# factoring it (a worst case) moves σ_min² by less, or by the a posteriori bound of
# _rayleigh_sigma_min. The worst case alone is too pessimistic at scale: at T = 7937 (H = 256,
# n = 32, d = 64) it is 3.6e-6, although there the Gram and QR routes' σ_min(Z) agree to 2e-15.
GRAM_SLACK = 1e-6
# ... and tries the a posteriori bound while the worst case is below this fraction of σ_min².
# Beyond, the products' own rounding in the residual (about a third of the worst case) would
# need a gap λ_2 − λ_1 above a hundredth of λ_1 for the bound to reach GRAM_SLACK, and the Gram
# matrix would often be formed for nothing.
POSTERIORI_REACH = 3e-4
# Relative accuracy of row_factor's Lanczos on its Gram factor's extremes: far inside GRAM_SLACK.
EXTREMES_TOL = 1e-10
# Lanczos runs for the two smallest eigenvalues of the Gram factor (_smallest_pair): a loose one
# first, then, where its error estimate is too large for row_factor's routes, a tight one
# restarted from its vector; each with the margin its λ_2 is shrunk by before it serves as a
# lower bound (Temple's and Kato–Temple's β). The loose run's accuracy on λ_1 is second order in
# its tolerance (and measured by a residual, not assumed). At T = 7937 (H = 256) it takes about
# 90 steps, against 81 + 178 for a tight run on λ_1 and a second tight run on the pair.
PAIR_RUNS = ((1e-5, 1e-3), (EXTREMES_TOL, 1e-7))           # (tolerance, margin on λ_2)
# Rows of Z that row_factor looks at first, to skip a Gram matrix that would be rejected.
_PROBE_ROWS = 256


def all_finite(A: np.ndarray) -> bool:
    """Every entry of the float64 array ``A`` is finite, without a temporary the size of ``A``.

    A sum of squares of finite numbers is finite unless it overflows, and one NaN or infinity
    makes it NaN or infinite; so a finite sum settles it in one read of ``A`` (about a quarter of
    the time of ``isfinite(A).all()`` at 8 M entries), and only an overflowing one (entries near
    ``1e154`` and beyond) takes the entrywise test."""
    if A.ndim != 2:
        return bool(np.isfinite(A).all())
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.einsum("ij,ij->", A, A)):
            return True
    return bool(np.isfinite(A).all())


def tri_solve(R: np.ndarray, rhs: np.ndarray, trans: str = "N") -> np.ndarray:
    """``R^{-1} rhs`` (or ``R^{-T} rhs`` with ``trans="T"``) for upper-triangular ``R``.

    No finiteness scan: callers pass arrays the engine computed (inputs are validated once, at
    the door). Keep ``R`` in Fortran order to avoid a copy per call.
    """
    return sla.solve_triangular(R, rhs, trans=trans, check_finite=False)


def gram_solve(R: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(R^T R)^{-1} rhs``: with ``R`` from ``A^T = Q R`` this is ``(A A^T)^{-1} rhs``."""
    return tri_solve(R, tri_solve(R, rhs, trans="T"))


def svdvals(A: np.ndarray) -> np.ndarray:
    """Singular values, descending (a stack of matrices: each one's)."""
    if A.ndim > 2:
        return np.linalg.svd(A, compute_uv=False)
    return sla.svdvals(A, check_finite=False) if A.size else np.zeros(0)


def triangular_extremes(R: np.ndarray, tol: float = 0.0, smallest: bool = True) -> tuple[float, float]:
    """Largest and smallest singular values of an upper-triangular square ``R``.

    ``tol``: the relative accuracy Lanczos stops at (0: machine precision); the dense SVD is
    always to machine precision. ``smallest=False``: Lanczos for the largest only (the smallest
    is then returned as NaN; the dense SVD and a zero on the diagonal give both as before).

    ``R`` is the triangular factor of ``Z^T = Q R``, so these are the extreme singular values of
    ``Z``. Small ``R``: dense SVD. Large ``R``: Lanczos on ``R^T R`` and, through two triangular
    solves per step, on ``(R^T R)^{-1}``; a deterministic start vector keeps runs reproducible.
    Returns ``sigma_min = 0`` when ``R`` has a zero on its diagonal. Only the upper triangle is
    read (the strict lower one may hold anything).
    """
    m = R.shape[0]
    if m == 0:
        return 0.0, 0.0
    if m <= _DENSE_SVD_LIMIT:
        s = sla.svdvals(np.triu(R), check_finite=False)
        return float(s[0]), float(s[-1])
    if np.any(np.diag(R) == 0):
        return float(sla.norm(np.triu(R), 2)), 0.0
    v0 = np.ones(m) / np.sqrt(m)
    R = np.asfortranarray(R)
    # scipy's BLAS for the products too, so that one thread pool does all the work (scipy_threads)
    trmv, trsv = sla.blas.dtrmv, sla.blas.dtrsv
    gram = spla.LinearOperator((m, m), matvec=lambda v: trmv(R, trmv(R, v), trans=1), dtype=np.float64)
    inv = spla.LinearOperator((m, m), matvec=lambda v: trsv(R, trsv(R, v, trans=1)), dtype=np.float64)
    with scipy_threads(outside_threads()):
        lam_max = spla.eigsh(gram, k=1, which="LA", v0=v0, tol=tol, return_eigenvectors=False)[0]
        if not smallest:
            return float(np.sqrt(lam_max)), float("nan")
        inv_max = spla.eigsh(inv, k=1, which="LA", v0=v0, tol=tol, return_eigenvectors=False)[0]
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
    R = np.array(qr[:min(p, m)], order="F")        # Fortran order, as the triangular solves want it
    for j in range(min(p, m) - 1):                  # zero below the diagonal, a contiguous column at a time
        R[j + 1:, j] = 0.0
    return R


def row_factor(Z: np.ndarray, sigma_above: float | None = None) -> tuple[np.ndarray, tuple[float, float]]:
    """Upper-triangular ``R`` (T, T) with ``R^T R = Z Z^T`` for ``Z`` (T, k), ``T ≤ k``, and the
    extreme singular values ``(σ_max, σ_min)`` of ``Z``.

    Tries the Cholesky factor of the Gram matrix first (about a third of a QR of ``Z^T``), and
    keeps it only when rounding cannot matter: forming ``Z Z^T`` moves it by at most
    ``γ_k ‖Z‖_F²`` and Cholesky by at most ``γ_{T+1} ‖R‖_F²`` (Higham, Thm 10.3, in 2-norm), so
    by Weyl ``σ_min(R)²`` is within ``δ`` of ``σ_min(Z)²``; accepted when ``δ`` (plus the
    eigensolver's own error) is at most ``GRAM_SLACK · σ_min(R)²``, or when the a posteriori
    bound of :func:`_rayleigh_sigma_min` pins ``σ_min(Z)²`` down to that fraction
    (:func:`_gram_sigmas`). Otherwise (ill-conditioned ``Z``, Cholesky breakdown) the QR of ``Z^T``.
    Cheap tests skip the Gram when it would be rejected anyway: the caller's ``sigma_above``, a
    few rows of ``Z`` (both before forming it) and a condition estimate (before the extremes).

    ``sigma_above``: a value the caller expects ``σ_min(Z)`` to lie below (from the weights that
    made ``Z``, for instance). It only picks the method: where ``δ`` would swamp a ``σ_min`` that
    small, the QR straight away; the result does not depend on it.
    """
    T, k = Z.shape
    with scipy_threads(outside_threads()):          # every large operation in scipy's BLAS
        if 0 < T <= k and _gram_may_do(Z, sigma_above):
            G = syrk(Z)                                                 # upper triangle of Z Z^T
            with np.errstate(over="ignore", invalid="ignore"):
                trace = float(np.trace(G))
            try:
                with scipy_threads(cholesky_threads(T)):
                    R = sla.cholesky(G, lower=False, overwrite_a=True, check_finite=False)
            except np.linalg.LinAlgError:
                R = None
            if R is not None and np.isfinite(trace) and all_finite(R):
                # ‖R‖_F² = tr(R^T R) ≤ tr(G)/(1 − γ_{T+1}) (the diagonal of Cholesky's backward
                # error is at most γ_{T+1} (R^T R)_ii): no pass over R
                delta = gamma(k) * trace + gamma(T + 1) * trace * (1 + gamma(T)) / (1 - gamma(T + 1))
                # Cheap rejection first: LAPACK's estimate is a lower bound on ‖R^{-1}‖_1, so
                # σ_min(R) ≤ sqrt(T) / estimate = sqrt(T) · rcond · ‖R‖_1 (dlantr: no copy of R).
                rcond, _ = sla.lapack.dtrcon(R, norm="1")
                if delta <= POSTERIORI_REACH * T * (rcond * sla.lapack.dlantr("1", R)) ** 2:
                    kept = _gram_sigmas(Z, R, delta, trace)
                    if kept is not None:
                        return R, kept
            G = R = None                            # rejected: not held through the QR (T² entries)
        R = qr_r(Z.T)
        return R, triangular_extremes(R, EXTREMES_TOL) if R.shape[0] == R.shape[1] else (0.0, 0.0)


def _gram_sigmas(Z: np.ndarray, R: np.ndarray, delta: float, trace: float) -> tuple[float, float] | None:
    """``(σ_max, σ_min)`` of ``Z`` from its Gram factor ``R`` (``R^T R`` within ``delta`` of
    ``Z Z^T``), when ``σ_min(Z)²`` is known to :data:`GRAM_SLACK` that way; otherwise None.

    In turn: Weyl (``delta`` and the eigensolver's own error are small enough), the a posteriori
    bound of :func:`_rayleigh_sigma_min` (one run of the eigensolver serves both), and, where
    only the eigensolver's error estimate stood in the way (``λ_1 ≈ λ_2``: the estimate needs a
    gap), Lanczos on ``λ_1`` alone to :data:`EXTREMES_TOL`.
    """
    pair = _smallest_pair(R)
    if pair is None:
        return None
    s_min = None
    if delta + pair.error <= GRAM_SLACK * pair.value:
        s_min = float(np.sqrt(pair.value))
    elif delta <= POSTERIORI_REACH * pair.value:
        s_min = _rayleigh_sigma_min(Z, R, delta, trace, pair)
    if s_min is None and pair.largest is None and delta <= GRAM_SLACK * pair.value:
        s_min = triangular_extremes(R, EXTREMES_TOL)[1]          # Lanczos on λ_1 alone
        s_min = s_min if delta <= GRAM_SLACK * s_min ** 2 else None
    if s_min is None:
        return None                      # rejected: no Lanczos run for σ_max
    s_max = pair.largest if pair.largest is not None else triangular_extremes(R, EXTREMES_TOL, smallest=False)[0]
    return s_max, s_min


@dataclass(frozen=True)
class SmallestPair:
    """The smallest eigenvalue of ``R^T R`` for an upper-triangular ``R``, as an eigensolver
    finds it: ``vector`` (unit), ``value`` (Lanczos: the vector's Rayleigh quotient, at least
    ``λ_1``; dense: the SVD's), an estimate ``error`` of ``|value − λ_1|``, ``second``: the
    solver's ``λ_2`` less its margin (a value taken to lie below ``λ_2``), and ``largest``:
    ``σ_max(R)`` when the dense SVD gave it (else None)."""
    vector: np.ndarray
    value: float
    error: float
    second: float
    largest: float | None = None


def _smallest_pair(R: np.ndarray) -> SmallestPair | None:
    """The two smallest eigenvalues of ``R^T R`` and the first one's eigenvector (None where the
    eigensolver fails): a dense SVD when ``R`` is small, else Lanczos on ``(R^T R)^{-1}``
    (:data:`PAIR_RUNS`): loose, then tight, restarted from the loose run's vector, when the
    error estimate is above a tenth of :data:`GRAM_SLACK` (then neither Weyl's route nor the
    Kato–Temple bound of :func:`row_factor` could reach that fraction).

    ``error``: for the dense SVD, its backward error (``m·u·σ_max`` on each singular value); for
    Lanczos, Temple's ``‖R^T R v − ρ v‖²/(λ_2 − ρ)`` with ``λ_2`` the solver's less the run's
    margin (infinite where that does not lie above ``ρ``). It rests on the run having found
    ``λ_2``: where ``λ_1`` and ``λ_2`` are too close for it to tell apart, the solver's second
    value is ``λ_3``, the vector mixes the pair's, and ``value`` can lie up to ``λ_2 − λ_1``
    above ``λ_1``, beyond ``error``.
    """
    m = R.shape[0]
    if m < 2:
        return None
    if m <= _DENSE_SVD_LIMIT:
        try:
            _, s, vt = sla.svd(np.triu(R), check_finite=False)
        except np.linalg.LinAlgError:
            return None
        shift = m * EPS * float(s[0])
        error = (2 * float(s[-1]) + shift) * shift
        second = max(float(s[-2]) - shift, 0.0) ** 2
        return SmallestPair(vt[-1], float(s[-1]) ** 2, error, second, float(s[0]))
    R = np.asfortranarray(R)
    trsv, trmv = sla.blas.dtrsv, sla.blas.dtrmv
    inv = spla.LinearOperator((m, m), matvec=lambda v: trsv(R, trsv(R, v, trans=1)), dtype=np.float64)
    v, pair = np.ones(m) / np.sqrt(m), None
    with scipy_threads(outside_threads()):
        for tol, margin in PAIR_RUNS:
            try:
                vals, vecs = spla.eigsh(inv, k=2, which="LA", v0=v, tol=tol)
            except (spla.ArpackError, spla.ArpackNoConvergence):
                return pair
            first, second = np.argsort(vals)[::-1]
            v = vecs[:, first] / np.linalg.norm(vecs[:, first])
            u = trmv(R, v)
            rho = float(u @ u)
            residual = float(np.linalg.norm(trmv(R, u, trans=1) - rho * v))
            if not (np.isfinite(rho) and np.isfinite(residual) and np.all(np.isfinite(v))):
                return pair
            lam_2 = float(1.0 / vals[second]) * (1 - margin)
            error = residual ** 2 / (lam_2 - rho) if lam_2 > rho else np.inf
            pair = SmallestPair(v, rho, error, lam_2)
            if error <= GRAM_SLACK / 10 * rho:
                break                                    # tight enough for either route
    return pair


def kato_temple_lower(rho: float, rho_err: float, residual: float, beta: float) -> float:
    """A lower bound on the smallest eigenvalue ``λ_1`` of a symmetric matrix, given a unit
    vector's Rayleigh quotient within ``rho_err`` of ``rho``, its residual norm
    ``‖A v − ρ v‖ ≤ residual`` and ``beta ≤ λ_2`` above the quotient (Kato–Temple:
    ``λ_1 ≥ ρ − residual²/(beta − ρ)``, taken at the interval's worse ends); ``-inf`` when
    ``beta`` does not lie above ``rho + rho_err``."""
    if not beta > rho + rho_err:
        return -np.inf
    return (rho - rho_err) - residual ** 2 / (beta - rho - rho_err)


def _rayleigh_sigma_min(Z: np.ndarray, R: np.ndarray, delta: float, trace: float,
                        pair: SmallestPair | None = None) -> float | None:
    """``σ_min(Z)`` from the Gram factor ``R`` (``R^T R`` within ``delta`` of ``Z Z^T`` in 2-norm,
    ``trace`` that of ``fl(Z Z^T)``) when :func:`rayleigh_bounds` pins ``σ_min(Z)²`` to
    :data:`GRAM_SLACK`; otherwise None. ``pair``: :func:`_smallest_pair`'s result, when known."""
    bounds = rayleigh_bounds(Z, R, delta, trace, pair)
    if bounds is None:
        return None
    lower, upper, rho = bounds
    if not (lower > 0 and upper - lower <= GRAM_SLACK * lower):
        return None
    return float(np.sqrt(rho))


def rayleigh_bounds(Z: np.ndarray, R: np.ndarray, delta: float, trace: float,
                    pair: SmallestPair | None = None) -> tuple[float, float, float] | None:
    """Bounds ``(lower, upper)`` on ``σ_min(Z)²`` and the Rayleigh quotient ``ρ`` they come from,
    given the Gram factor ``R`` (``R^T R`` within ``delta`` of ``Z Z^T`` in 2-norm, ``trace`` that
    of ``fl(Z Z^T)``); None where the eigensolver fails (``Z`` needs two rows or more).
    ``pair``: :func:`_smallest_pair` of ``R``, when the caller has it.

    ``R``'s smallest eigenvector ``v`` (two steps of inverse iteration after Lanczos) is a near
    eigenvector of ``Z Z^T`` itself: its Rayleigh quotient ``ρ = ‖Z^T v‖²/‖v‖²`` bounds
    ``σ_min(Z)²`` from above, and Kato–Temple's inequality bounds it from below by
    ``ρ − ε²/(β − ρ)``, where ``ε = ‖Z Z^T v − ρ v‖/‖v‖`` is computed with ``Z`` and
    ``β = λ_2(R^T R) − δ ≤ λ_2(Z Z^T)`` (Weyl). The bound is second order in ``ε``. The
    matrix-vector products' rounding is added to ``ε`` and to ``ρ`` from norms
    (``‖Z‖₂ ≤ ‖Z‖_F``); ``β`` rests on the eigensolver's ``λ_2``, less the margin of
    :data:`PAIR_RUNS` for the run that gave it.
    """
    T, k = Z.shape
    if T < 2:
        return None
    pair = _smallest_pair(R) if pair is None else pair
    if pair is None:
        return None
    v, second = pair.vector, pair.second
    Rf = np.asfortranarray(R)
    with np.errstate(all="ignore"):
        for _ in range(2):                               # inverse iteration: R^T R x = v
            v = sla.blas.dtrsv(Rf, sla.blas.dtrsv(Rf, v, trans=1))
            v = v / np.linalg.norm(v)
    if not np.all(np.isfinite(v)):
        return None
    nv = float(np.linalg.norm(v))
    # trace = fl(Σ fl(g_ii)) ≥ (1 − γ_k)(1 − γ_T)‖Z‖_F², and the square root and product round
    fro = np.sqrt(trace * (1 + 2 * gamma(k)) * (1 + 2 * gamma(T))) * (1 + 4 * EPS)    # ≥ ‖Z‖_F ≥ ‖Z‖₂
    with scipy_threads(outside_threads()):
        t = Z.T @ v
        w = Z @ t
    nt = float(np.linalg.norm(t)) * (1 + gamma(k))
    e_t = gamma(T) * fro * nv * (1 + gamma(T))                        # ≥ ‖fl(Z^T v) − Z^T v‖
    rho = nt ** 2 / nv ** 2                                           # ≈ the Rayleigh quotient
    rho_err = ((2 * nt + e_t) * e_t / nv ** 2 + 4 * (gamma(k) + gamma(T)) * rho) * (1 + 8 * EPS)
    r = w - rho * v
    # ‖Z Z^T v − ρ_exact v‖ ≤ ‖fl(w − ρ v)‖ + (rounding of w − ρ v) + ‖fl(Z t) − Z t‖ + ‖Z‖‖t − Z^T v‖ + |ρ − ρ_exact|
    eps = (float(np.linalg.norm(r)) * (1 + gamma(T)) + EPS * (float(np.linalg.norm(w)) + 2 * rho * nv)
           + gamma(k) * fro * nt + fro * e_t + rho_err * nv) * (1 + 8 * EPS) / nv
    beta = second - delta
    lower = kato_temple_lower(rho, rho_err, eps, beta)
    return (lower, rho + rho_err, rho) if np.isfinite(rho + rho_err) else None


def _gram_may_do(Z: np.ndarray, sigma_above: float | None = None) -> bool:
    """False when ``Z``'s Gram factor would fail :func:`row_factor`'s test (it only picks the method).

    The rounding term ``δ`` is ``(γ_k + γ_{T+1}) ‖Z‖_F²`` up to rounding, and the test needs
    ``δ ≤ POSTERIORI_REACH · σ_min(R)²`` with ``σ_min(R)² ≤ σ_min(Z)² + δ``: hopeless where
    ``σ_min(Z)`` lies below ``sigma_above`` and ``POSTERIORI_REACH · sigma_above²`` below
    ``(1 − POSTERIORI_REACH) δ``. Above :data:`_PROBE_ROWS` rows, the Gram matrix of a subset
    of rows is a principal submatrix of ``Z Z^T``, so its smallest eigenvalue bounds
    ``σ_min(Z)²`` from above too (Cauchy interlacing).
    """
    T, k = Z.shape
    with np.errstate(over="ignore", invalid="ignore"):       # a Gram matrix past float64's range
        delta = (gamma(k) + gamma(T + 1)) * float(np.einsum("ij,ij->", Z, Z))
        if sigma_above is not None and POSTERIORI_REACH * np.float64(sigma_above) ** 2 < (1 - POSTERIORI_REACH) * delta:
            return False
        if T <= _PROBE_ROWS:
            return True
        probe = Z[:: T // _PROBE_ROWS][:_PROBE_ROWS]
        P = probe @ probe.T
    if not (np.all(np.isfinite(P)) and np.isfinite(delta)):
        return False
    return POSTERIORI_REACH * float(np.linalg.eigvalsh(P)[0]) >= delta


# Rows of Z per symmetric rank-k update. scipy's bundled OpenBLAS crashed (SIGSEGV) in a
# multithreaded dsyrk with T = 15873 rows and k ≥ 2048 columns (H = 512, n = 32, d = 64), and
# not with T = 7937; larger Gram matrices are formed by blocks of rows: dsyrk on the diagonal
# blocks, dgemm beside them.
SYRK_ROWS = 4096


# Largest order at which a Cholesky factorization runs on more than one thread. OpenBLAS's
# threaded dpotrf (its internal dsyrk_thread) crashed with SIGSEGV at order 15873, in scipy's
# and in numpy's bundled builds alike, and ran at 12000 (upstream reports of the same class:
# OpenMathLib/OpenBLAS#2821, #1413); on one thread it ran at 15873 (28 s).
CHOLESKY_THREADED_MAX = 12000


def cholesky_threads(order: int) -> int:
    """BLAS threads for a Cholesky factorization of this order (see CHOLESKY_THREADED_MAX)."""
    return outside_threads() if order <= CHOLESKY_THREADED_MAX else 1


def syrk(Z: np.ndarray) -> np.ndarray:
    """The upper triangle of ``Z Z^T`` (T, T), Fortran order (the strict lower triangle is zero
    or the upper's mirror). Each entry is one sum of ``k`` products, in BLAS's order."""
    T, k = Z.shape
    Z = np.ascontiguousarray(Z)
    if T <= SYRK_ROWS:
        return sla.blas.dsyrk(1.0, Z.T, trans=1)
    G = np.zeros((T, T), order="F")
    for lo in range(0, T, SYRK_ROWS):
        hi = min(T, lo + SYRK_ROWS)
        G[lo:hi, lo:hi] = sla.blas.dsyrk(1.0, Z[lo:hi].T, trans=1)
        if hi < T:
            G[lo:hi, hi:] = sla.blas.dgemm(1.0, Z[lo:hi].T, Z[hi:].T, trans_a=1)
    return G


# Rows (or columns) per block when a square matrix is copied between its triangles.
_MIRROR_BLOCK = 512


def gram(Z: np.ndarray) -> np.ndarray:
    """``Z Z^T`` (T, T) for ``Z`` (T, k), in Fortran order with both triangles filled (one
    symmetric rank-k update; the lower triangle is copied from the upper)."""
    with scipy_threads(outside_threads()):
        G = syrk(Z)
    _mirror(G, to_lower=True)
    return G


def _mirror(G: np.ndarray, to_lower: bool) -> None:
    """Copy ``G``'s upper triangle onto its lower one (or back), a block at a time."""
    T = G.shape[0]
    for lo in range(0, T, _MIRROR_BLOCK):
        hi = min(lo + _MIRROR_BLOCK, T)
        block = G[lo:hi, lo:hi]
        i, j = np.triu_indices(hi - lo, 1)
        if to_lower:
            G[hi:, lo:hi] = G[lo:hi, hi:].T
            block[j, i] = block[i, j]
        else:
            G[lo:hi, hi:] = G[hi:, lo:hi].T
            block[i, j] = block[j, i]


def shifted_cholesky(G: np.ndarray, diagonal: np.ndarray, shift: float) -> bool:
    """Cholesky of ``fl(G − shift·I)`` in place, keeping ``G`` to factor again.

    ``G`` (Fortran order) holds a symmetric matrix in its strict lower triangle and ``diagonal``
    its diagonal; the upper triangle is overwritten with the factor ``R`` (``R^T R ≈ G − shift·I``)
    and the lower triangle is left as it was. Returns whether the factorization ran to completion
    (every pivot positive): only then does Higham's bound ``R^T R = A + ΔA``, ``|ΔA| ≤ γ_{T+1}
    |R^T| |R|`` hold, for LAPACK's blocked algorithm as for the textbook one.
    """
    if not G.flags.f_contiguous:
        raise ValueError("shifted_cholesky needs G in Fortran order")
    _mirror(G, to_lower=False)
    np.fill_diagonal(G, diagonal - shift)
    with scipy_threads(cholesky_threads(G.shape[0])):
        R, info = sla.lapack.dpotrf(G, lower=0, clean=0, overwrite_a=1)
    if not np.shares_memory(R, G):                     # f2py copied: factor in G after all
        G[...] = np.triu(R) + np.tril(G, -1)
    return info == 0 and bool(np.all(np.isfinite(np.diagonal(G))))


def right_inverse(Z: np.ndarray, pseudo: bool = False) -> tuple[np.ndarray, str]:
    """An approximate right inverse ``X`` of ``Z`` (T, F), ``F ≥ T``, and how it was formed:
    ``Z^T (Z Z^T)^{-1}`` by Cholesky (``"cholesky"``), or the pseudo-inverse (``"pinv"``) when
    that fails or ``pseudo`` asks for it (only its residual matters to the caller).

    Cholesky's leaves ``I − ZX`` at about ``u·cond(Z)²``, the pseudo-inverse's at about
    ``u·cond(Z)``, at the cost of an SVD. By Cholesky, two T × T matrices at a time besides ``Z``
    and ``X`` (the pseudo-inverse takes about 3.5 times ``Z``): the factor overwrites ``Z Z^T``
    (exactly symmetric: NumPy forms it by ``syrk``, so its transpose, in Fortran order, is the
    same matrix; otherwise a Fortran copy) and the inverse overwrites the identity; the same
    roundings as factoring and solving copies.
    """
    T = Z.shape[0]
    if not pseudo:
        try:
            G = (Z @ Z.T).T
            if not np.array_equal(G, G.T):             # a BLAS that does not mirror: LAPACK's copy
                G = np.asfortranarray(G.T)
            factor = sla.cho_factor(G, overwrite_a=True, check_finite=False)
            del G
            inverse = sla.cho_solve(factor, np.eye(T, order="F"), overwrite_b=True, check_finite=False)
            del factor
            return Z.T @ inverse, "cholesky"
        except (np.linalg.LinAlgError, ValueError):
            pass
    from ..limits import require_memory
    require_memory(8 * 3.5 * Z.size, f"a pseudo-inverse of Z ({T} × {Z.shape[1]}) for its right inverse")
    return np.linalg.pinv(Z), "pinv"
