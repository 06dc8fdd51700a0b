"""Data far from unit scale: built at unit scale, the weights scaled back by exact powers of two."""

from __future__ import annotations

import numpy as np

from .arith import FLOAT64, for_bits
from .data import Dataset, as_dataset
from .errors import InputError
from .model import sealed
from .verify import verify


# Data whose largest magnitude lies outside [2^-SCALE_WINDOW, 2^SCALE_WINDOW] is built at unit
# scale (see scaling_exponents); inside it, the build runs on the data as given.
SCALE_WINDOW = 64


def scaling_exponents(data: Dataset, skip: bool) -> tuple[int, int, int] | None:
    """Powers of two ``(e_E, e_X, e_Y)`` that bring ``E``, ``X`` and the readout's target to unit
    scale, or None when the data is within :data:`SCALE_WINDOW` and is built as given.

    The model is scale-invariant up to its weights: with ``E = 2^e_E E'``, ``X = 2^e_X X'`` and
    targets ``2^e_Y Y'``, weights that memorize ``(E', X', Y')`` memorize the data once
    ``W_K ← 2^-e_E W_K``, ``W_Q ← 2^-e_X W_Q``, ``W_V ← 2^(e_Y − e_E) W_V``; scaling by powers of
    two is exact in floating point.
    """
    def exponent(a: np.ndarray) -> int:
        top = float(np.abs(a).max())
        return int(np.frexp(top)[1]) if top > 0 else 0

    e_E, e_X = exponent(data.E), exponent(data.X)
    target = np.abs(data.Y).max(axis=0)
    if skip:                            # x's first d_o coordinates join the outputs (d_o > d is
        k = min(data.d, data.d_o)       # refused later, by the model's shape checks)
        target[:k] = np.maximum(target[:k], np.abs(data.X[:, :k]).max(axis=0))
    e_Y = exponent(target)
    if abs(e_E) <= SCALE_WINDOW and abs(e_X) <= SCALE_WINDOW and e_Y <= SCALE_WINDOW:
        return None
    return e_E, e_X, max(e_Y, 0)


def build_scaled(data: Dataset, exponents: tuple[int, int, int], skip: bool, tol: float, build_unit,
                 layer: str | None = None, before_layer: Dataset | None = None):
    """``build_unit(unit_data)`` (a build without skip) on data at unit scale
    (:func:`scaling_exponents`), the weights scaled back and checked by the forward pass on the
    data as given. After a pre-layer ``layer``, ``data`` holds its float64 outputs and
    ``before_layer`` the data it reads: the weights carry the layer, and the check is the two
    layers' on ``before_layer``.

    Raises:
        InputError: weights at the data's scale are beyond float64's range, or do not reproduce
            the labels there although they do at unit scale.
    """
    e_E, e_X, e_Y = exponents
    X_o = data.X[:, :data.d_o]                # (with d_o > d, refused by build_unit's checks: d columns)
    target = np.ldexp(data.Y, -e_Y)
    if skip:
        target[:, :X_o.shape[1]] -= np.ldexp(X_o, -e_Y)
    unit = as_dataset(np.ldexp(data.E, -e_E), np.ldexp(data.X, -e_X), target)
    result = build_unit(unit)
    w = result.weights
    ar = for_bits(w.bits)
    with np.errstate(over="ignore", under="ignore"):             # out of range: refused below
        weights = sealed(ar.ldexp(w.W_K, -e_E), ar.ldexp(w.W_Q, -e_X), ar.ldexp(w.W_V, e_Y - e_E),
                         w.W_O.copy(), w.W_D.copy(), skip=skip, bits=w.bits, prelayer=layer)
    scales = (f"max |E| ≈ 2^{e_E}, max |X| ≈ 2^{e_X}, targets up to 2^{e_Y}")
    if not all(np.isfinite(FLOAT64.to_host(getattr(weights, m))).all() for m in ("W_K", "W_Q", "W_V")):
        raise InputError(f"the data's scale ({scales}) puts the weights that memorize it beyond float64's "
                         "range; rescale E, X or Y towards 1", what="data out of range")
    check = verify(weights, data if layer is None else before_layer, tol)
    skip_top = float(np.abs(X_o).max()) if skip else 0.0
    if not check.passed and check.rank_Z == check.T and 2.0 ** -53 * skip_top >= check.tol / 8:
        raise InputError(f"with --skip the output is x's first d_o coordinates (up to {skip_top:.3g}) plus the "
                         f"heads' outputs, and the labels (up to {float(np.abs(data.Y).max()):.3g}) are their "
                         "difference. Data beyond 2^±64 is built at unit scale from that difference taken in "
                         "float64, whatever the precision: it keeps about 16 significant digits of the sum, "
                         "too few of the labels' digits for this tolerance (lost to cancellation: "
                         f"max |f − y| = {check.max_abs_error:.3g}, allowed "
                         f"{check.tol:.3g}); build without --skip, or bring X's first d_o coordinates towards "
                         "the labels' scale (within 2^±64 the build takes the difference at its own precision)",
                         what="data out of range")
    if not check.passed:
        raise InputError(f"the weights memorize the data at unit scale, but not at its own scale ({scales}): "
                         f"there rank Z = {check.rank_Z} of T = {check.T}, max |f − y| = "
                         f"{check.max_abs_error:.3g} (allowed {check.tol:.3g}), because float64 overflows or "
                         "underflows; rescale E, X or Y towards 1", what="data out of range")
    result.weights, result.data, result.verification = weights, data, check
    result.precision_reason += (f"; built at unit scale (E, X, targets divided by 2^{e_E}, 2^{e_X}, 2^{e_Y}; "
                                "the figures above are at that scale) and the weights scaled back exactly")
    return result
