"""Interval arithmetic (mpmath.iv): outward rounding at every operation, ``exp`` included.

Certificates run the model's own forward pass and readout in this arithmetic
(:func:`construct.model.feature_matrix` with ``ar=Interval(bits)``): every array holds intervals
that enclose the exact real-number values.
"""

from __future__ import annotations

import contextlib
import math

import mpmath
import numpy as np

from .mp import Mpmath

_point = np.frompyfunc(lambda v: mpmath.iv.mpf(v), 1, 1)
_exp = np.frompyfunc(lambda v: mpmath.iv.exp(v), 1, 1)
_mid = np.frompyfunc(lambda v: mpmath.mpf(v.mid), 1, 1)


def _rounded(value, rounding: str) -> float:
    """``value`` rounded to float64 up (``"u"``) or down (``"d"``), as IEEE-754's directed
    roundings do, subnormal numbers and the ends of the range included (past the largest float,
    away from zero ±inf, towards zero ±max): the float nearest to ``value``, then one step back
    where it lies on the wrong side."""
    value = mpmath.mpf(value)
    f = float(value)
    if rounding == "u" and mpmath.mpf(f) < value:
        f = math.nextafter(f, math.inf)
    elif rounding == "d" and mpmath.mpf(f) > value:
        f = math.nextafter(f, -math.inf)
    return f


_upper = np.frompyfunc(lambda v: _rounded(mpmath.mpf(v.b), "u"), 1, 1)
_lower = np.frompyfunc(lambda v: _rounded(mpmath.mpf(v.a), "d"), 1, 1)
_magnitude = np.frompyfunc(lambda v: _rounded(max(abs(mpmath.mpf(v.a)), abs(mpmath.mpf(v.b))), "u"), 1, 1)


class Interval(Mpmath):
    """Intervals of ``bits``-bit endpoints."""

    @property
    def name(self) -> str:
        return f"{self.bits}-bit intervals (mpmath.iv)"

    @contextlib.contextmanager
    def working(self):
        saved = mpmath.iv.prec
        mpmath.iv.prec = self.bits                  # the interval context has no workprec of its own
        try:
            with mpmath.mp.workprec(self.bits):
                yield
        finally:
            mpmath.iv.prec = saved

    def asarray(self, x):
        """Point intervals holding the exact values of ``x`` (float64 or ``mpf``)."""
        return _point(np.asarray(x, dtype=object)).astype(object)

    def exp(self, A):
        return _exp(A).astype(object)

    def softmax_shift(self, logits):
        """A point value per row (the midpoint of its first logit): exact to subtract, and it keeps
        ``exp`` in range; the maximum of intervals is not a number."""
        return np.array([[mpmath.iv.mpf(mpmath.mpf(row[0].mid))] for row in logits.reshape(-1, logits.shape[-1])],
                        dtype=object).reshape(logits.shape[:-1] + (1,))

    def midpoints(self, A):
        """The intervals' midpoints, as ``mpf`` numbers."""
        return _mid(A).astype(object)

    def upper(self, A) -> np.ndarray:
        """Upper ends, rounded up to float64."""
        with np.errstate(over="ignore"):            # beyond float64: ±inf, the bound rounded outwards
            return _upper(A).astype(np.float64)

    def lower(self, A) -> np.ndarray:
        """Lower ends, rounded down to float64."""
        with np.errstate(over="ignore"):            # beyond float64: ±inf, the bound rounded outwards
            return _lower(A).astype(np.float64)

    def magnitude(self, A) -> np.ndarray:
        """Upper bounds on ``|A|``, rounded up to float64."""
        with np.errstate(over="ignore"):            # beyond float64: ±inf, the bound rounded outwards
            return _magnitude(A).astype(np.float64)

    def right_inverse(self, Z):
        """An approximate right inverse of the midpoints of ``Z`` (``mpf``; only its residual
        matters to the caller). Raises ZeroDivisionError when ``Z Z^T`` is singular."""
        Zm = self.midpoints(Z)
        T = Zm.shape[0]
        return Zm.T @ Mpmath.gram_solve_rows(self, Zm, np.eye(T, dtype=object) * mpmath.mpf(1))
