"""The row-space factor of ``Z`` for array-API arithmetics (a GPU through CuPy), grown in place.

The same factor as :class:`construct.arith.factor.RowSpaceFactor` (read its docstring first):
the triangular ``R`` of ``Z_A^T = Q R`` over the fitted rows ``A`` and the known features, never
``Q``; a new group is projected on the fitted rows by two triangular solves (semi-normal
equations, with a corrected step where ``ε·κ(R)²`` or the cancellation in the residual's Gram
matrix could cost accuracy); a head's new features enter ``R`` by a QR of ``[R; B]``; the
staged group borders ``R``. What differs is how, for an array library without LAPACK's
triangular-pentagonal QR and without leading dimensions:

- **The update** ``[R; B] = Q [R'; 0]`` (``B``: the fitted rows' new features, ``p × a``) runs
  in column panels of :attr:`BlockedRowFactor.panel` columns. A panel ``[R_jj; B_j]`` is
  factored by a Householder QR (``Arithmetic.householder``); its reflectors are ``[e_k; y_k]``
  exactly, because the rows of ``R_jj`` below the diagonal are zero and stay zero, so they act
  on the panel's rows of ``R`` and on ``B`` alone. In compact form ``Q_j = I − V T V^T`` with
  ``V = [I; Y]`` and ``T^{-1} = diag(1/τ) + triu(Y^T Y, 1)``; the trailing columns get
  ``W = T^T (R_j,rest + Y^T B_rest)``, ``R_j,rest −= W``, ``B_rest −= Y W``. This is LAPACK's
  ``tpqrt`` with ``l = 0`` (the same reflectors, the same backward stability: a product of
  Householder reflectors), with matrix products as its only large operations.
- **Storage**: ``R`` lives in one flat buffer of ``T²`` entries, as a contiguous ``a × a``
  matrix at its start (CuPy's products copy strided views: a view of a larger square would be
  copied whole at every product). Bordering ``R`` to ``(a + m)`` rows moves its rows within the
  buffer, last row first, in blocks through a scratch array, so one ``T × T`` buffer suffices
  (the CPU keeps two): at ``T = 50,000`` ``Z`` is 41 GB and ``R`` 20 GB. For the same reason
  the products with the fitted rows ``Z[:a, :f]`` go through ``Arithmetic.prefix_times`` and
  ``times_prefix``, which CuPy's arithmetic runs by cuBLAS on ``Z``'s memory with its row
  length as leading dimension, without a copy of ``Z_A``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConstructionError
from .factor import _SEMI_NORMAL_ACCURACY
from .lapack import EPS

# Entries moved at once when R is bordered in place (2^24 entries: 128 MB of scratch).
_MOVE_BLOCK = 1 << 24


def tp_update(ar, R, B, extra=None, panel: int = 128):
    """``[R; B] = Q [R'; 0]`` in place: ``R`` (k, k) upper triangular becomes ``R'``, ``B`` (p, k)
    is used up. ``extra = (X, Y)``, ``X`` (k, m) and ``Y`` (p, m), becomes ``Q^T [X; Y]``
    (LAPACK's ``tpmqrt``), returned as a pair (``None`` when not given).

    ``R`` and ``X`` are updated through slice assignment; ``B`` and ``Y`` may be views or copies.
    """
    xp = ar.xp
    k = R.shape[0]
    X, Y = extra if extra is not None else (None, None)
    for j in range(0, k, panel):                 # B holds columns j.. of the original
        e = min(j + panel, k)
        Rjj, V, T = ar.householder(xp.concat([R[j:e, j:e], B[:, :e - j]], axis=0))
        R[j:e, j:e] = Rjj
        Tt = xp.matrix_transpose(T)
        Vt = xp.matrix_transpose(V)
        if e < k:
            W = Tt @ (R[j:e, e:] + Vt @ B[:, e - j:])
            R[j:e, e:] = R[j:e, e:] - W
            B = B[:, e - j:] - V @ W             # only the trailing columns are needed from here
        if X is not None:
            W = Tt @ (X[j:e, :] + Vt @ Y)
            X[j:e, :] = X[j:e, :] - W
            Y = Y - V @ W
    return (X, Y) if extra is not None else None


class BlockedRowFactor:
    """Triangular factor of the fitted rows ``Z[:a, :f]`` of a feature matrix ``Z`` (T, H·d), in
    any float64 array-API arithmetic ``ar``: the interface of
    :class:`construct.arith.factor.RowSpaceFactor` (``stage``, ``advance``, ``add_features``,
    ``commit``, ``R``)."""

    # Columns per panel of the update (see the module's docstring): a number, or a function of
    # the number of fitted rows; an arithmetic may set its own (``factor_panel``).
    panel = 128

    def __init__(self, Z, ar):
        self.Z, self.ar, self.xp = Z, ar, ar.xp
        self.panel = getattr(ar, "factor_panel", self.panel)
        self.a = 0
        self.f = 0
        self._stop = 0
        self._buf = None                           # T² entries, R at the start, made at first use
        self._W = ar.zeros((0, 0))                 # staged rows' coordinates Q^T V^T, (a, m)
        self._Rres = ar.zeros((0, 0))              # triangular factor of their residual
        self._frob2 = 0.0                          # ‖R‖_F², kept as the CPU factor keeps it
        self._staged_frob2 = 0.0
        self._x = np.zeros(0)                      # inverse iteration's vector (host)
        self._inv_norm2 = 0.0

    @property
    def R(self):
        """``R`` (a, a), upper triangular with zeros below: a view of the buffer."""
        a = self.a
        if self._buf is None:
            return self.ar.zeros((a, a))
        return self.xp.reshape(self._buf[:a * a], (a, a))

    # -- the interface ------------------------------------------------------------------------

    def stage(self, stop: int):
        """Project rows ``a..stop−1`` on the fitted rows; returns ``C`` (stop − a, a)."""
        xp = self.xp
        V = self.Z[self.a:stop, :self.f]
        m = V.shape[0]
        self._stop = stop
        if self.a == 0:
            self._W = self.ar.zeros((0, m))
            self._Rres = self.ar.qr_r(xp.matrix_transpose(V))
            return self.ar.zeros((m, 0))
        return self._project(V, self.ar.prefix_times(self.Z, self.a, self.f, xp.matrix_transpose(V)))

    def advance(self, f_new: int, stop: int, alongside=None):
        """:meth:`add_features` up to ``f_new``, :meth:`commit`, then :meth:`stage` up to ``stop``
        (``alongside``, the caller's work that does not touch the factor, called first)."""
        if alongside is not None:
            alongside()
        self.add_features(f_new)
        self.commit()
        return self.stage(stop)

    def add_features(self, f_new: int) -> None:
        """Extend the known features to ``0..f_new−1``, for the fitted and the staged rows."""
        if f_new <= self.f:
            return
        xp, ar = self.xp, self.ar
        staged_new = xp.matrix_transpose(self.Z[self.a:self._stop, self.f:f_new])       # (p, m)
        self._staged_frob2 += float(ar.to_host(xp.sum(staged_new * staged_new)))
        if self.a:
            B = ar.copy(xp.matrix_transpose(self.Z[:self.a, self.f:f_new]))              # (p, a)
            self._frob2 += float(ar.to_host(xp.sum(B * B)))
            panel = self.panel(self.a) if callable(self.panel) else self.panel
            if self._stop > self.a:
                self._W, staged_new = tp_update(ar, self.R, B, (self._W, staged_new), panel)
            else:
                tp_update(ar, self.R, B, None, panel)
        if self._stop > self.a:
            self._Rres = ar.qr_r(xp.concat([self._Rres, staged_new], axis=0))
        self.f = f_new

    def commit(self) -> None:
        """Border ``R`` with the staged group.

        Raises:
            ConstructionError: the staged rows are numerically dependent on the fitted ones.
        """
        xp, ar = self.xp, self.ar
        a, stop = self.a, self._stop
        m = stop - a
        Rres = self._Rres[:m, ...]
        if Rres.shape[0] < m or bool(ar.to_host(xp.any(xp.linalg.diagonal(Rres) == 0))):
            raise ConstructionError(f"rows {a}..{stop - 1} of Z are dependent on the earlier rows")
        if self._buf is None:
            T = self.Z.shape[0]
            self._buf = ar.zeros((T * T,))
        self._widen(a, stop)
        R = self.xp.reshape(self._buf[:stop * stop], (stop, stop))
        R[:a, a:] = self._W
        R[a:, :a] = ar.zeros((m, a))
        R[a:, a:] = Rres
        self.a = stop
        self._frob2 += self._staged_frob2
        self._staged_frob2 = 0.0
        self._W = ar.zeros((stop, 0))

    # -- the steps ------------------------------------------------------------------------------

    def _widen(self, a: int, b: int) -> None:
        """Move ``R`` (a × a, row length a) to rows of length ``b`` in the buffer, in place.

        Row ``i`` moves from ``i·a`` to ``i·b`` (``b ≥ a``): later rows first, a block of rows at a
        time through a copy, so no entry is overwritten before it is read.
        """
        if a == 0 or a == b:
            return
        buf = self._buf
        rows = max(1, _MOVE_BLOCK // a)
        hi = a
        while hi > 0:
            lo = max(0, hi - rows)
            block = self.ar.copy(self.xp.reshape(buf[lo * a:hi * a], (hi - lo, a)))
            target = self.xp.reshape(buf[lo * b:hi * b], (hi - lo, b))
            target[:, :a] = block
            hi = lo

    def _project(self, V, ZV):
        """The rest of :meth:`stage`, from ``ZV = Z_A V^T`` (a, m): ``C``, and the staged group's
        coordinates and residual factor."""
        xp, ar = self.xp, self.ar
        m = V.shape[0]
        R = self.R
        rhs = xp.concat([ZV, ar.asarray(self._probe()[:, None])], axis=1)
        W = ar.tri_solve(R, rhs, trans=True)
        C = ar.tri_solve(R, W)
        W, y = W[:, :m], ar.to_host(C[:, m])
        C = xp.matrix_transpose(C[:, :m])
        inv_norm2 = self._inv_norm2 = float(np.linalg.norm(y))
        self._x = y / inv_norm2 if inv_norm2 > 0 else y
        VV = ar.to_host(V @ xp.matrix_transpose(V))
        self._staged_frob2 = float(np.trace(VV))
        G = VV - ar.to_host(xp.matrix_transpose(W) @ W)                 # Gram matrix of the residual
        lam = np.linalg.eigvalsh(G)[0] if m else 1.0
        accurate = (lam > EPS * self._staged_frob2 / _SEMI_NORMAL_ACCURACY
                    and math.isfinite(inv_norm2) and EPS * self._frob2 * inv_norm2 <= _SEMI_NORMAL_ACCURACY)
        if accurate:
            Rres = ar.asarray(np.linalg.cholesky(G).T)
        else:
            Z, a, f = self.Z, self.a, self.f
            ZR = ar.prefix_times(Z, a, f, xp.matrix_transpose(V - ar.times_prefix(C, Z, a, f)))
            dW = ar.tri_solve(R, ZR, trans=True)                       # the correction, R δC^T
            C = C + xp.matrix_transpose(ar.tri_solve(R, dW))
            W = W + dW
            Rres = ar.qr_r(xp.matrix_transpose(V - ar.times_prefix(C, Z, a, f)))
        self._W, self._Rres = W, Rres
        return C

    def _probe(self) -> np.ndarray:
        """The inverse iteration's vector for the current ``R`` (as the CPU factor's)."""
        a, x = self.a, self._x
        v = np.concatenate([x, np.full(a - x.size, 1.0 / np.sqrt(a))])
        return v / np.linalg.norm(v)
