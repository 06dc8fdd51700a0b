"""mpmath at a chosen number of bits: NumPy object arrays of ``mpf`` numbers.

The same stages run here as in float64; only the kernels differ: normal equations instead of
orthogonal factorizations (squaring the condition number costs bits, which the precision policy
pays for), and mpmath's own ``exp``, ``log`` and singular values. Quantities that only need to
be large enough (scales, norms, the scale search) are computed in float64 (:attr:`low`).
"""

from __future__ import annotations

import contextlib

import mpmath
import numpy as np

from .cpu import Float64, NumpyArithmetic

_exp = np.frompyfunc(mpmath.exp, 1, 1)
_log = np.frompyfunc(mpmath.log, 1, 1)
_sqrt = np.frompyfunc(mpmath.sqrt, 1, 1)
_ldexp = np.frompyfunc(mpmath.ldexp, 2, 1)
_mpf = np.frompyfunc(mpmath.mpf, 1, 1)


def _lu_solve(A, b):
    """``mpmath.lu_solve``, with a singular ``A`` always reported as its ZeroDivisionError: where
    a column has no pivot other than zeros (rows of rounding-sized entries), its LU ends with
    ``TypeError`` on the pivot index it never set."""
    try:
        return mpmath.lu_solve(A, b)
    except TypeError as exc:
        if "NoneType" not in str(exc):                 # not the unset pivot index
            raise
        raise ZeroDivisionError("matrix is numerically singular (no pivot in a column)") from None


class Mpmath(NumpyArithmetic):
    """mpmath with ``bits`` bits of mantissa."""

    rounds_weights = True

    def __init__(self, bits: int):
        super().__init__()
        self.bits = int(bits)
        self.weights_bits = self.bits
        self.low = Float64()

    @property
    def name(self) -> str:
        return f"{self.bits} bits (mpmath)"

    @contextlib.contextmanager
    def session(self):
        with self.low.session(), self.working():
            yield self

    def working(self):
        return mpmath.mp.workprec(self.bits)

    # -- arrays ---------------------------------------------------------------------------------

    def asarray(self, x):
        """``x`` as ``mpf`` numbers (exact from float64); an object array is taken as it is."""
        a = np.asarray(x)
        if a.dtype == object:
            return a
        return _mpf(a.astype(np.float64)).astype(object)

    def zeros(self, shape):
        return self.asarray(np.zeros(shape))

    def rounded(self, A):
        with self.working():
            return _mpf(np.asarray(A, dtype=object)).astype(object)

    def exp(self, A):
        return _objects(_exp(A))

    def log(self, A):
        return _objects(_log(A))

    def sqrt(self, A):
        return _objects(_sqrt(A))

    def ldexp(self, A, e: int):
        return _objects(_ldexp(A, e))

    # -- linear algebra -------------------------------------------------------------------------

    def svdvals(self, A):
        if A.size == 0:
            return np.zeros(0, dtype=object)
        s = mpmath.svd_r(_matrix(A), compute_uv=False)
        return np.array(sorted((s[i] for i in range(len(s))), reverse=True), dtype=object)

    def solve(self, A, B):
        """``A^{-1} B`` for square ``A`` and ``B`` (k,) or (k, r), by mpmath's LU."""
        vector = np.ndim(B) == 1
        Bm = np.asarray(B, dtype=object).reshape(len(B), -1)
        Am = _matrix(A)
        cols = [np.array(_lu_solve(Am, _matrix(Bm[:, [j]])).tolist(), dtype=object)[:, 0]
                for j in range(Bm.shape[1])]
        X = np.stack(cols, axis=1) if cols else np.zeros((Am.cols, 0), dtype=object)
        return X[:, 0] if vector else X

    def gram_solve_rows(self, A, rhs):
        """``(A A^T)^{-1} rhs`` by the normal equations: the squared condition is paid in bits."""
        return self.solve(A @ A.T, rhs)

    def min_norm_rows(self, E, ell):
        return np.stack([Et.T @ self.gram_solve_rows(Et, l) for Et, l in zip(E, ell)])

    def inverse_gram_times(self, A, U):
        return self.solve(A.T @ A, U).T


def _objects(r):
    return r.astype(object) if isinstance(r, np.ndarray) else r


def _matrix(A: np.ndarray) -> mpmath.matrix:
    return mpmath.matrix(np.atleast_2d(A).tolist())


def decimal_strings(A: np.ndarray, bits: int) -> np.ndarray:
    """The values of ``mpf`` array ``A`` (``bits``-bit numbers) as decimal strings that round-trip
    at ``bits``: :func:`from_decimal_strings` gives ``A`` back exactly."""
    digits = int(bits * 0.30103) + 3
    return np.array([mpmath.nstr(v, digits, strip_zeros=False) for v in A.ravel()], dtype=str).reshape(A.shape)


def from_decimal_strings(text: np.ndarray, bits: int) -> np.ndarray:
    """``mpf`` numbers of ``bits`` bits from decimal strings.

    Raises:
        ValueError: a string is not a decimal number.
    """
    with mpmath.mp.workprec(bits):
        try:
            return np.array([mpmath.mpf(t) for t in text.ravel()], dtype=object).reshape(text.shape)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
