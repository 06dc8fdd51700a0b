"""Precision: float64 (NumPy/LAPACK) or mpmath at a chosen number of bits, one algebra for both.

An array carries its precision in its dtype: ``float64``, or ``object`` holding mpmath ``mpf``
numbers, computed while :meth:`Precision.working` holds mpmath at ``bits`` bits. The helpers
below dispatch on the dtype, so the construction's code is written once and runs at either
precision; only the kernels differ (LAPACK for float64, mpmath's matrix routines otherwise).

MATH.md §5 says when float64 is not enough: the rank-one term's rounding, about
``c_h·ε·‖a‖‖b‖‖x‖‖E‖`` on the logits, must stay well below what keeps the rank. See
:func:`bits_needed`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import mpmath
import numpy as np

EPS64 = float(np.finfo(np.float64).eps)

# What auto aims for: the exact model's outputs within this of the readout's solution, so that a
# certificate can prove an error far below any float64 tolerance.
ERROR_TARGET = 1e-30
# Bits on top of the prediction (it is an estimate, not a bound) and the least auto ever uses.
GUARD_BITS = 16
MIN_BITS = 128
# The most bits a build may use or a weights file may hold. Every accepted precision round-trips
# through the file's decimal strings: 8192 bits need 2,469 digits, within Python's limit of 4,300
# on integer-string conversion (which mpmath's conversions go through).
MAX_BITS = 8192
MIN_FILE_BITS = 53


@dataclass(frozen=True)
class Precision:
    """``float64``, or mpmath with ``bits`` bits of mantissa."""

    bits: int | None = None

    @property
    def is_float64(self) -> bool:
        return self.bits is None

    @property
    def eps(self) -> float:
        """Unit roundoff: ``2^-52`` or ``2^(1 - bits)``."""
        return EPS64 if self.bits is None else 2.0 ** (1 - self.bits)

    def __str__(self) -> str:
        return "float64" if self.bits is None else f"{self.bits} bits (mpmath)"

    def working(self):
        """Context in which mpmath computes at this precision (does nothing for float64)."""
        return contextlib.nullcontext() if self.bits is None else mpmath.mp.workprec(self.bits)

    def asarray(self, x) -> np.ndarray:
        """``x`` at this precision: float64, or an object array of ``mpf`` (exact from float64)."""
        a = np.asarray(x)
        if self.bits is None:
            return a.astype(np.float64)
        if a.dtype == object:
            return a
        return np.frompyfunc(mpmath.mpf, 1, 1)(a.astype(np.float64)).astype(object)

    def rounded(self, A: np.ndarray) -> np.ndarray:
        """``A`` rounded to this precision (mpmath's matrix routines may return extra bits)."""
        if self.bits is None:
            return np.asarray(A, dtype=np.float64)
        with self.working():
            return np.frompyfunc(mpmath.mpf, 1, 1)(np.asarray(A, dtype=object)).astype(object)

    def zeros(self, shape) -> np.ndarray:
        return np.zeros(shape) if self.bits is None else self.asarray(np.zeros(shape))


FLOAT64 = Precision()


def parse(value) -> Precision | str:
    """``"auto"``, ``"float64"``, a :class:`Precision`, or a number of bits from 53 to
    :data:`MAX_BITS` (an ``int``, or its digits as a string), from the command line or the API.

    Raises:
        ValueError: anything else (a float such as ``200.5`` is refused, never truncated).
    """
    if isinstance(value, Precision):
        return value
    if value in ("auto", "float64"):
        return value if value == "auto" else FLOAT64
    if isinstance(value, str) and value.strip().isdigit():
        bits = int(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        bits = int(value)
    else:
        raise ValueError(f"precision must be auto, float64 or a number of bits, got {value!r}")
    if not 53 <= bits <= MAX_BITS:
        raise ValueError(f"precision must be from 53 bits (float64's) to {MAX_BITS} bits, got {bits}")
    return Precision(bits)


def of(A: np.ndarray) -> Precision:
    """The precision an array is held at (mpmath's current working precision for ``mpf`` arrays)."""
    return FLOAT64 if np.asarray(A).dtype != object else Precision(mpmath.mp.prec)


def is_mp(A: np.ndarray) -> bool:
    return np.asarray(A).dtype == object


def to_float(A) -> np.ndarray:
    """Nearest float64 values (for reporting and for choices that need no more)."""
    a = np.asarray(A)
    return a.astype(np.float64) if a.dtype == object else a


_mp_exp = np.frompyfunc(mpmath.exp, 1, 1)
_mp_log = np.frompyfunc(mpmath.log, 1, 1)
_mp_sqrt = np.frompyfunc(mpmath.sqrt, 1, 1)


_mp_ldexp = np.frompyfunc(mpmath.ldexp, 2, 1)


def ldexp(A: np.ndarray, e: int) -> np.ndarray:
    """``A · 2^e``, exact (float64 away from overflow and underflow, or ``mpf``)."""
    return _mp_ldexp(A, e).astype(object) if is_mp(A) else np.ldexp(A, e)


def exp(A: np.ndarray) -> np.ndarray:
    return _mp_exp(A).astype(object) if is_mp(A) else np.exp(A)


def log(A: np.ndarray) -> np.ndarray:
    return _mp_log(A).astype(object) if is_mp(A) else np.log(A)


def sqrt(A: np.ndarray) -> np.ndarray:
    return _mp_sqrt(A).astype(object) if is_mp(A) else np.sqrt(A)


def _matrix(A: np.ndarray) -> mpmath.matrix:
    return mpmath.matrix(np.atleast_2d(A).tolist())


def _array(M: mpmath.matrix) -> np.ndarray:
    return np.array(M.tolist(), dtype=object)


def solve(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A^{-1} B`` for square ``A`` and ``B`` (k,) or (k, r)."""
    if not (is_mp(A) or is_mp(B)):
        return np.linalg.solve(A, B)
    vector = np.ndim(B) == 1
    Bm = np.asarray(B, dtype=object).reshape(len(B), -1)
    Am = _matrix(A)
    cols = [_array(mpmath.lu_solve(Am, _matrix(Bm[:, [j]])))[:, 0] for j in range(Bm.shape[1])]
    X = np.stack(cols, axis=1) if cols else np.zeros((Am.cols, 0), dtype=object)
    return X[:, 0] if vector else X


def gram_solve_rows(A: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(A A^T)^{-1} rhs`` for ``A`` of full row rank; at high precision the squared condition is paid for in bits."""
    return solve(A @ A.T, rhs)


def svdvals(A: np.ndarray) -> np.ndarray:
    """Singular values, descending (``mpf`` for an mpmath array)."""
    if not is_mp(A):
        import scipy.linalg as sla
        return sla.svdvals(A, check_finite=False) if A.size else np.zeros(0)
    if A.size == 0:
        return np.zeros(0, dtype=object)
    s = mpmath.svd_r(_matrix(A), compute_uv=False)
    return np.array(sorted((s[i] for i in range(len(s))), reverse=True), dtype=object)


def bits_needed(feature_rounding: float, condition: float, target: float = ERROR_TARGET) -> int:
    """Bits at which MATH.md §5's rounding, scaled by the conditioning, falls below ``target``.

    Args:
        feature_rounding: the float64 prediction of how far the rank-one term's rounding moves a
            head's features (``2ρ c_h ε ‖a‖ ‖b‖ ‖x‖ ‖E‖``, largest over heads; 1 if unknown).
        condition: the condition number ``σ_max/σ_min`` of ``Z`` (inf if unknown: ``2^52`` is used).
        target: the output error to reach.

    At ``p`` bits the rounding is ``2^(53 − p)`` times float64's, and the readout multiplies a
    feature error by up to ``cond(Z)``.
    """
    cond = condition if math.isfinite(condition) and condition >= 1 else 2.0 ** 52
    need = max(feature_rounding, EPS64) * cond / target
    return max(MIN_BITS, 53 + math.ceil(math.log2(max(need, 1.0))) + GUARD_BITS)


def logit_rounding(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray, eps: float = EPS64) -> float:
    """MATH.md §5's estimate of the rounding of the logits ``E^(t) W_K W_Q^T x^(t)`` over the examples.

    The standard bound for a product evaluated through its factors, ``γ_k ‖E‖ ‖W_K‖ ‖W_Q‖ ‖x‖``
    with ``γ_k ≈ k ε`` and ``k = d + d_h``. With a saturation scale ``c`` in ``W_K`` it contains
    the rank-one term's ``c ε ‖a‖ ‖b‖ ‖x‖ ‖E‖``; with nearly dependent tokens or queries it is the
    cancellation inside ``W_K W_Q^T``.
    """
    E, X, W_K, W_Q = (to_float(v) for v in (E, X, W_K, W_Q))
    if not E.size or not W_K.size:
        return 0.0
    k = E.shape[-1] + W_K.shape[1]
    norms = np.linalg.norm(E, axis=(1, 2)) * np.linalg.norm(X, axis=1)
    return float(k * eps * np.linalg.norm(W_K, 2) * np.linalg.norm(W_Q, 2) * norms.max())
