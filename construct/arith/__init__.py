"""The arithmetic seam: the one place that knows the numerical libraries.

Stage code (the construction, the model, verification, certificates) computes with an
:class:`Arithmetic` it is handed once, and never asks what kind of numbers it holds:

- :class:`Float64` (:mod:`.cpu`): NumPy arrays, LAPACK through SciPy, the CPU's thread policy;
- :class:`Mpmath` (:mod:`.mp`): ``mpf`` numbers at a chosen number of bits;
- :class:`Interval` (:mod:`.interval`): mpmath's interval arithmetic, for certificates;
- :class:`Arithmetic` itself (:mod:`.base`): float64 in any namespace of the Python array API
  standard (array-api-strict in the tests; CuPy plugs in here).

See ``docs/architecture.md``.
"""

from __future__ import annotations

from .base import Arithmetic, RowRank
from .cpu import Float64
from .interval import Interval
from .lapack import EPS
from .mp import Mpmath


def for_bits(bits: int | None) -> Arithmetic:
    """A fresh arithmetic for weights of ``bits`` bits: float64 for None, else mpmath."""
    return Float64() if bits is None else Mpmath(bits)


# Host-side float64, for the checks and reports that need no session of their own.
FLOAT64 = Float64()


def numerical_rank(A):
    """Float64 rank of ``A`` under the one rank tolerance, and its singular values (descending)."""
    return FLOAT64.numerical_rank(A)


def rank_tol(sigma_max: float, shape: tuple[int, ...], eps: float = EPS) -> float:
    """The rank tolerance ``max(shape) · eps · σ_max`` (NumPy's ``matrix_rank`` convention)."""
    return max(shape) * eps * sigma_max


__all__ = ["EPS", "FLOAT64", "Arithmetic", "Float64", "Interval", "Mpmath", "RowRank", "for_bits",
           "numerical_rank", "rank_tol"]
