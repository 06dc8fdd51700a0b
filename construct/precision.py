"""Precision: float64, or mpmath at a chosen number of bits; and how many bits a build needs.

A :class:`Precision` is a value (what ``build(..., precision=)`` accepts and a result reports);
the arithmetic that computes at it comes from :func:`construct.arith.for_bits`.

docs/math.md §5 says when float64 is not enough: the rank-one term's rounding, about
``c_h·ε·‖a‖‖b‖‖x‖‖E‖`` on the logits, must stay well below what keeps the rank. See
:func:`bits_needed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        """Machine epsilon (twice the unit roundoff): ``2^-52`` or ``2^(1 - bits)``."""
        return EPS64 if self.bits is None else 2.0 ** (1 - self.bits)

    def __str__(self) -> str:
        return "float64" if self.bits is None else f"{self.bits} bits (mpmath)"


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
    if isinstance(value, str) and value.isascii() and value.isdigit():      # not " 200", "2_00", "²⁰⁰"
        bits = int(value)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        bits = int(value)
    else:
        raise ValueError(f"precision must be auto, float64 or a number of bits, got {value!r}")
    if not 53 <= bits <= MAX_BITS:
        raise ValueError(f"precision must be from 53 bits (float64's) to {MAX_BITS} bits, got {bits}")
    return Precision(bits)


def bits_needed(feature_rounding: float, condition: float, target: float = ERROR_TARGET) -> int:
    """Bits at which docs/math.md §5's rounding, scaled by the conditioning, falls below ``target``.

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
