"""The row-space factor of ``Z`` behind the row reduction (stage 4.3), grown head by head.

Head ``h`` needs ``C = Z'_S (Z'_A)^+`` where ``Z'`` are the columns of heads ``1..h−1``, ``A`` the
examples fitted so far and ``S`` the new group. Since ``Z'_A`` has full row rank,
``rank Z_{A∪S} ≥ rank Z_A + rank(Z''_S − C Z''_A)`` (Lemma 1 after a row operation).

Refactorizing ``Z'_A`` for every head costs ``O(H)`` full factorizations. Instead this keeps the
triangular factor ``R`` of ``Z_A^T = Q R`` (never ``Q``; ``R^T R = Z_A Z_A^T``), and touches
``Z_A`` once per group:

- :meth:`RowSpaceFactor.stage` projects a new group's rows ``V`` on ``Z_A``: its coordinates
  ``W = Q^T V^T = R^{-T} Z_A V^T``, coefficients ``C = (R^{-1} W)^T`` and the triangular factor
  of its residual ``V − C Z_A``. When ``ε·κ(R)²`` or the cancellation in the residual's Gram
  matrix could cost accuracy (ill-conditioned data: shared contexts), it switches to corrected
  semi-normal equations with an explicit residual instead. ``κ(R)`` is estimated without a
  pass of its own: ``‖R‖_F`` is kept through the updates, and ``‖R^{-1}‖_2`` by inverse
  iteration, one step per group, as one more right-hand side of the solves for ``C``.
- :meth:`RowSpaceFactor.add_features` appends a head's ``d`` feature columns: for the fitted
  rows ``R ← qr([R; Z_h[A]^T])``, a triangular-pentagonal QR (LAPACK ``tpqrt``); the staged
  group's coordinates go through the same reflectors (``tpmqrt``), and what falls outside the
  old basis joins its residual factor. No second pass over ``Z_A``.
- :meth:`RowSpaceFactor.commit` borders ``R`` with the staged group: ``[[R, W], [0, R_res]]``.
- :meth:`RowSpaceFactor.advance` does the three for the next head, with the new group's
  products ``Z_A V^T`` (which do not involve ``R``) on one core while ``tpqrt`` runs on the
  other.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from scipy.linalg import lapack

from ..errors import ConstructionError
from . import strided
from .lapack import EPS, qr_r
from .strided import tri_solve
from .threads import halves, together

# Take the one-pass (semi-normal) projection only while its relative error stays below this.
_SEMI_NORMAL_ACCURACY = 1e-8


class RowSpaceFactor:
    """Triangular factor of the fitted rows ``Z[:a, :f]`` of a feature matrix ``Z`` (T, H·d).

    Fitted rows are a prefix ``0..a−1`` (groups are consecutive), known features a prefix
    ``0..f−1``; ``Z`` is the caller's array, read in place. At most one group is staged: rows
    ``a..stop−1``, projected on the fitted rows but not yet part of ``R``.
    """

    def __init__(self, Z: np.ndarray, parallel: bool = False):
        self.Z = Z
        self.parallel = parallel                   # products with all fitted rows in two threads
        self.a = 0
        self.f = 0
        self.R = np.zeros((0, 0), order="F")
        self._stop = 0                              # staged rows: a..stop−1
        self._W = np.zeros((0, 0), order="F")      # their coordinates Q^T V^T, (a, m)
        self._Rres = np.zeros((0, 0))               # triangular factor of their residual
        # For the condition of R: ‖R‖_F² (= ‖Z[:a, :f]‖_F², kept up to date: tpqrt and the
        # bordering are orthogonal), the staged rows' share of it, and the unit vector of
        # inverse iteration on (R^T R)^{-1}, one step per group riding on the solves for C.
        self._frob2 = 0.0
        self._staged_frob2 = 0.0
        self._x = np.zeros(0)
        self._inv_norm2 = 0.0                       # the last estimate of ‖R^{-1}‖_2²
        # R lives in the leading block of one Fortran (T, T) array, taken at the first commit: a
        # commit borders it there and tpqrt updates it there (construct.arith.strided), so it is
        # never copied. (A fresh (a × a) array per head paid for the zeroing of its pages, about
        # 0.1 s per head at T = 7937; two buffers in turn, for a copy per head, took 4 s in all.)
        self._buffer: np.ndarray | None = None

    def stage(self, stop: int) -> np.ndarray:
        """Project rows ``a..stop−1`` on the fitted rows; returns ``C`` (stop − a, a).

        ``C`` minimizes ``‖Z[a:stop, :f] − C Z[:a, :f]‖`` (minimum norm): the row reduction's
        ``Z'_S (Z'_A)^+``.
        """
        V = self.Z[self.a:stop, :self.f]
        m = V.shape[0]
        self._stop = stop
        if self.a == 0:
            self._W = np.zeros((0, m), order="F")
            self._Rres = qr_r(V.T)
            return np.zeros((m, 0))
        rhs = np.empty((self.a, m + 1), order="F")
        self._fitted_times(V.T, rhs[:, :m])
        return self._project(V, rhs)

    def advance(self, f_new: int, stop: int, alongside=None) -> np.ndarray:
        """:meth:`add_features` up to ``f_new``, :meth:`commit`, then :meth:`stage` up to ``stop``.

        The new group's products with the rows about to be fitted, ``Z_A V^T``, do not involve
        ``R``: with ``parallel`` they run while the helper thread updates ``R`` (``tpqrt``
        releases the GIL), two operations of about the same size at every step. ``alongside``,
        if given, is called on the helper thread while this one solves with ``R`` (triangular
        solves on one core): work of the caller's that does not touch the factor.
        """
        a = self._stop                              # fitted once the staged group is committed
        V = self.Z[a:stop, :f_new]
        rhs = np.empty((a, stop - a + 1), order="F")
        together(lambda: self.add_features(f_new),
                 lambda: np.matmul(self.Z[:a, :f_new], V.T, out=rhs[:, :-1]), self.parallel)
        self.commit()
        self._stop = stop
        if alongside is None:
            return self._project(V, rhs)
        return together(alongside, lambda: self._project(V, rhs), self.parallel)[1]

    def _project(self, V: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """The rest of :meth:`stage`, from ``rhs[:, :m] = Z_A V^T``: ``C``, and the staged
        group's coordinates and residual factor."""
        m = V.shape[0]
        rhs[:, m] = self._probe()
        W = tri_solve(self.R, rhs, trans="T")
        C = tri_solve(self.R, W)
        W, C, y = W[:, :m], C[:, :m].T, C[:, m]
        # y = (R^T R)^{-1} x for a unit x, so ‖y‖ ≤ ‖R^{-1}‖² (an estimate from below, close
        # once the iteration has settled; as LAPACK's condition estimates are), and ‖R‖_F ≥ ‖R‖_2.
        inv_norm2 = self._inv_norm2 = float(np.linalg.norm(y))
        self._x = y / inv_norm2 if inv_norm2 > 0 else y
        VV = V @ V.T
        self._staged_frob2 = float(np.trace(VV))
        G = VV - W.T @ W                            # Gram matrix of the residual
        lam = np.linalg.eigvalsh(G)[0] if m else 1.0
        accurate = (lam > EPS * self._staged_frob2 / _SEMI_NORMAL_ACCURACY
                    and np.isfinite(inv_norm2) and EPS * self._frob2 * inv_norm2 <= _SEMI_NORMAL_ACCURACY)
        if accurate:
            Rres = sla.cholesky(G, lower=False, check_finite=False)
        else:
            ZR = np.empty((self.a, m))
            self._fitted_times((V - self._times_fitted(C)).T, ZR)
            dW = tri_solve(self.R, ZR, trans="T")    # the correction in coordinates: R δC^T
            C += tri_solve(self.R, dW).T
            W = W + dW                               # = R C^T, without a product with R
            residual = V - self._times_fitted(C)
            Rres = qr_r(residual.T)
        self._W, self._Rres = np.asfortranarray(W), Rres
        return C

    def _fitted_times(self, B: np.ndarray, out: np.ndarray) -> None:
        """``out = Z_A B`` for ``B`` (f, k): the fitted rows in two halves (:func:`halves`)."""
        Z_A = self.Z[:self.a, :self.f]
        halves(lambda lo, hi: np.matmul(Z_A[lo:hi], B, out=out[lo:hi]), self.a, self.parallel)

    def _times_fitted(self, C: np.ndarray) -> np.ndarray:
        """``C Z_A`` for ``C`` (k, a), shape (k, f): the features in two halves."""
        Z_A = self.Z[:self.a, :self.f]
        out = np.empty((C.shape[0], self.f))
        halves(lambda lo, hi: np.matmul(C, Z_A[:, lo:hi], out=out[:, lo:hi]), self.f, self.parallel)
        return out

    def _probe(self) -> np.ndarray:
        """The inverse iteration's vector for the current ``R``: the last one, extended over the
        rows fitted since by a constant (a fixed start, so that builds are reproducible)."""
        a, x = self.a, self._x
        tail = np.full(a - x.size, 1.0 / np.sqrt(a))
        v = np.concatenate([x, tail])
        return v / np.linalg.norm(v)

    def add_features(self, f_new: int) -> None:
        """Extend the known features to ``0..f_new−1``, for the fitted and the staged rows."""
        if f_new <= self.f:
            return
        staged_new = self.Z[self.a:self._stop, self.f:f_new].T          # (f_new − f, m)
        self._staged_frob2 += float(np.einsum("ij,ij->", staged_new, staged_new))
        if self.a:
            # A copy, always: tpqrt overwrites B, and for one fitted row the transposed slice is
            # already Fortran-contiguous, so asfortranarray would hand LAPACK a view of Z.
            B = np.array(self.Z[:self.a, self.f:f_new].T, order="F")
            self._frob2 += float(np.einsum("ij,ij->", B, B))
            # In place; tpqrt overwrites only the upper triangle of R, the zeros below stay. B
            # becomes the reflectors, Tr their block factors.
            Tr = strided.tpqrt(self.R, B, 32)
            if self._stop > self.a:
                W, Y, info = lapack.dtpmqrt(0, B, Tr, self._W, np.asfortranarray(staged_new),
                                            trans="T")
                if info != 0:
                    raise ConstructionError(f"tpmqrt failed (info = {info}) updating the factor of Z")
                self._W, staged_new = W, Y
        if self._stop > self.a:
            self._Rres = qr_r(np.vstack([self._Rres, staged_new]))
        self.f = f_new

    def commit(self) -> None:
        """Border ``R`` with the staged group.

        Raises:
            ConstructionError: the staged rows are numerically dependent on the fitted ones.
        """
        a, stop = self.a, self._stop
        m = stop - a
        Rres = self._Rres[:m]
        if Rres.shape[0] < m or np.any(np.diag(Rres) == 0):
            raise ConstructionError(f"rows {a}..{stop - 1} of Z are dependent on the earlier rows")
        if self._buffer is None:
            T = self.Z.shape[0]
            self._buffer = np.empty((T, T), order="F")
        R = self._buffer[:stop, :stop]              # R[:a, :a] is in place already
        R[a:, :a] = 0.0
        R[:a, a:] = self._W
        R[a:, a:] = Rres
        self.R, self.a = R, stop
        self._frob2 += self._staged_frob2
        self._staged_frob2 = 0.0
        self._W = np.zeros((stop, 0), order="F")



class CoordinateFactor:
    """:class:`RowSpaceFactor` of the coordinates ``P = Z (I_H ⊗ Q)`` of a feature matrix ``Z``
    (T, H·d) whose every head's features lie in the span of ``Q`` (d, n), orthonormal, ``n < d``:
    on a shared context ``E_0`` (n, d), the row space of ``E_0`` (every feature is ``E_0^T s``).

    ``P P^T = Z (I_H ⊗ Q Q^T) Z^T = Z Z^T``, so ``R^T R = Z Z^T`` and the projections
    ``C = Z'_S (Z'_A)^+ = P'_S (P'_A)^+`` are the same in exact arithmetic, with ``n`` columns per
    head instead of ``d``: every product with the fitted rows and the update of ``R`` cost
    ``n/d`` of what they cost on ``Z``. Computing ``P`` moves it by about ``u·√d·‖Z‖``, as much
    as the factorization moves ``Z`` itself. A head's coordinates are computed once its features
    are final, when the factor first asks for them. Memory: ``P`` is ``n/d`` of ``Z``, held until
    ``R`` covers every row and feature.

    The interface of :class:`RowSpaceFactor`, in ``Z``'s feature counts (multiples of ``d``).
    """

    def __init__(self, Z: np.ndarray, Q: np.ndarray, parallel: bool = False):
        T, F = Z.shape
        self.d, self.n = Q.shape
        self.Z, self.Q = Z, Q
        self.P = np.empty((T, F // self.d * self.n))
        self._inner = RowSpaceFactor(self.P, parallel)
        self._heads = 0                             # heads whose coordinates are in P

    @property
    def R(self) -> np.ndarray:
        return self._inner.R

    def _columns(self, f: int) -> int:
        """The coordinates' count for ``Z``'s first ``f`` features, computing them as needed."""
        d, n = self.d, self.n
        if f % d:
            raise ValueError(f"{f} features are not whole heads of {d}")
        for h in range(self._heads, f // d):
            np.matmul(self.Z[:, h * d:(h + 1) * d], self.Q, out=self.P[:, h * n:(h + 1) * n])
        self._heads = max(self._heads, f // d)
        return f // d * n

    def stage(self, stop: int) -> np.ndarray:
        return self._inner.stage(stop)

    def advance(self, f_new: int, stop: int, alongside=None) -> np.ndarray:
        return self._inner.advance(self._columns(f_new), stop, alongside)

    def add_features(self, f_new: int) -> None:
        self._inner.add_features(self._columns(f_new))

    def commit(self) -> None:
        if self.P is None:                          # R is final: nothing is staged
            return
        self._inner.commit()
        P = self.P
        if P is not None and self._inner.a == P.shape[0] and self._heads * self.n == P.shape[1]:
            self._inner.Z = self.P = None           # R is final: the coordinates can go



class GramRowReduction:
    """The row reduction by normal equations: ``C = V Z_A^T (Z_A Z_A^T)^{-1}``, refactorized per head.

    The interface of :class:`RowSpaceFactor` for any arithmetic ``ar`` (mpmath: small problems,
    where refactorizing is cheap; squaring the condition number costs bits, not accuracy, since
    the precision is chosen with the conditioning in it; an array-API arithmetic: its
    ``gram_solve_rows`` is by QR).
    """

    def __init__(self, Z, ar):
        self.Z = Z
        self.ar = ar
        self.a = 0
        self.f = 0
        self._stop = 0

    def stage(self, stop: int):
        """``C`` (stop − a, a) for rows ``a..stop−1`` on the fitted rows, over the known features."""
        self._stop = stop
        Z_A, V = self.Z[:self.a, :self.f], self.Z[self.a:stop, :self.f]
        if self.a == 0:
            return self.ar.zeros((stop, 0))
        T = self.ar.xp.matrix_transpose if self.ar.xp is not np else np.transpose
        return T(self.ar.gram_solve_rows(Z_A, Z_A @ T(V)))

    def add_features(self, f_new: int) -> None:
        self.f = max(self.f, f_new)

    def advance(self, f_new: int, stop: int, alongside=None):
        """:meth:`add_features`, :meth:`commit` and :meth:`stage`, as :meth:`RowSpaceFactor.advance`
        (``alongside`` called first)."""
        if alongside is not None:
            alongside()
        self.add_features(f_new)
        self.commit()
        return self.stage(stop)

    def commit(self) -> None:
        self.a = self._stop
