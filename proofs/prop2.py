"""Proposition 2 (tightness): with one shared context, ``rank Z ≤ H(n−1)+1`` for every ``θ``.

``Z = [S_1 … S_H] (I_H ⊗ E)`` with row-stochastic attention matrices ``S_h`` (T, n); the vectors
``(1_n, 0, …, −1_n, …, 0)`` (block 1 against block h) are ``H − 1`` independent null vectors of
``[S_1 … S_H]``, so its rank, and that of ``Z``, is at most ``Hn − (H − 1)``.
"""

from __future__ import annotations

import numpy as np

from construct.data import Dataset
from construct.arith import for_bits, numerical_rank
from construct.model import Weights, check_compatible, head_attention, layer_inputs

from .check import Check, features_rank, features_rounding, one_blas_thread, rank_at_most

STATEMENT = "Proposition 2"


def attention_matrix(data: Dataset, weights: Weights) -> np.ndarray:
    """``[S_1 … S_H]`` (T, H·n): every head's attention over the context, side by side (float64;
    evaluated in the weights' own arithmetic, on what the attention layer reads: the data after
    the weights' pre-layer, if they have one)."""
    ar = for_bits(weights.bits)
    with ar.working():
        E, X = layer_inputs(weights, ar.asarray(data.E), ar.asarray(data.X), ar)
        return np.hstack([ar.to_host(head_attention(E, X, weights.W_K[h], weights.W_Q[h], ar))
                          for h in range(weights.H)])


@one_blas_thread
def check(data: Dataset, weights: Weights) -> Check:
    """Proposition 2 for ``data`` and any weights (from the engine or not).

    Undecided where ``Z``'s singular values beyond the bound are within its rounding
    (:func:`proofs.check.features_rounding`, relative to the tokens): float64 cannot tell them
    from 0 there (tokens that nearly cancel make ``Z`` small, and its rounding large beside it).
    """
    check_compatible(weights, data.d, data.d_o)
    H, n = weights.H, data.n
    shared = bool(np.all(data.E == data.E[:1]))
    bound = H * (n - 1) + 1
    Z, rank_Z, sv = features_rank(data, weights)
    eps = for_bits(weights.bits).eps
    rounding = features_rounding(layer_inputs(weights, data.E, data.X)[0], H, eps)
    S = attention_matrix(data, weights)                # (a pre-layer keeps shared contexts shared)
    # The proof's null vectors: each block's rows sum to one, so block 1 minus block h vanishes.
    sums = S.reshape(data.T, H, n).sum(axis=2)
    null_residual = float(np.abs(sums[:, :1] - sums[:, 1:]).max()) if H > 1 else 0.0
    q = {"rank_Z": rank_Z, "bound": bound, "rank_attention": numerical_rank(S)[0],
         "null_residual": null_residual, "rounding_Z": rounding, "T": data.T, "H": H, "n": n}
    return Check(STATEMENT, {"all contexts equal": shared}, rank_at_most(rank_Z, sv, bound, Z.shape, rounding, eps), q)
