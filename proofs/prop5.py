"""Proposition 5: if every token's coordinates sum to one constant, ``rank Z ≤ H(d−1)+1`` for every ``θ``.

Each head's feature ``z_h = E^T s_h`` is a convex combination of tokens, so ``1_d^T z_h`` is that
constant for every example and head: block 1 minus block h of ``1_d`` gives ``H − 1``
independent null vectors of ``Z`` (``H`` when the constant is 0).
"""

from __future__ import annotations

import numpy as np

from construct.data import Dataset
from construct.arith import EPS, for_bits
from construct.model import Weights, check_compatible, layer_inputs

from .check import Check, features_rank, features_rounding, one_blas_thread, rank_at_most

STATEMENT = "Proposition 5"


@one_blas_thread
def check(data: Dataset, weights: Weights) -> Check:
    """Proposition 5 for ``data`` and any weights; undecided where ``Z``'s singular values beyond
    the bound are within its rounding (:func:`proofs.check.features_rounding`)."""
    check_compatible(weights, data.d, data.d_o)
    H, d = weights.H, data.d
    sums = data.E.sum(axis=2)
    # Sums agree to their rounding: forming a token and summing its d coordinates cost under
    # d·ε of its sum of absolute values, and data made by shifting tokens onto the constant carry
    # the shift's rounding, at the data's scale. So each token's sum lies within 4d·ε of the
    # constant times the larger of its own scale and the median token's, an interval at most
    # half the tokens can widen (one large token must not widen every other's); one constant
    # means the intervals share a point, the middle of which is named.
    scale = np.abs(data.E).sum(axis=2)
    radius = 4 * d * EPS * np.maximum(scale, np.median(scale))
    low, high = float((sums - radius).max()), float((sums + radius).min())
    same = low <= high
    const = (low + high) / 2 if same else float(sums.mean())
    bound = H * (d - 1) + 1
    Z, rank_Z, sv = features_rank(data, weights)
    E_layer = layer_inputs(weights, data.E, data.X)[0]
    eps = for_bits(weights.bits).eps
    rounding = features_rounding(E_layer, H, eps)
    block_sums = Z.reshape(data.T, H, d).sum(axis=2)
    q = {"rank_Z": rank_Z, "bound": bound, "rounding_Z": rounding, "T": data.T, "H": H, "d": d}
    if same:                                  # (else there is no one constant to name)
        # The constant of what the layer reads: a pre-layer (the mean shift) moves each token by
        # its context's mean, so tokens summing to γ sum to 2γ there, and so do Z's blocks.
        layer_const = float(E_layer.sum(axis=2).mean()) if weights.prelayer is not None else const
        q.update(constant=layer_const, null_residual=float(np.abs(block_sums - layer_const).max()))
    return Check(STATEMENT, {"token coordinates sum to one constant": same},
                 rank_at_most(rank_Z, sv, bound, Z.shape, rounding, eps), q)
