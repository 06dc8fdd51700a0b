"""Claim 1: one head realizes any interior attention targets on ``m ≤ min(n, d_h)`` examples.

With ``ℓ^(t) = log s^(t)``, ``u^(t) = E^(t)+ ℓ^(t)`` (right pseudo-inverse) and
``W_S = U (X_S^T X_S)^{-1} X_S^T``, we get ``W_S x^(t) = u^(t)`` and
``softmax(E^(t) W_S x^(t)) = s^(t)``. ``W_S`` is returned factored as ``K Q^T`` with
``K = U (X_S^T X_S)^{-1}`` and ``Q = X_S``, the first columns of ``W_K`` and ``W_Q``.
"""

from __future__ import annotations

import numpy as np

from .arith import FLOAT64, Arithmetic


def interior_targets(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """Random interior targets in the simplex, shape (m, n): softmax of standard normal logits.

    Gaussian logits keep ``‖log s‖_∞`` moderate (a Dirichlet draw can put mass 1e-6 on a token),
    which keeps the logits ``ℓ`` of Lemma 4, and so the saturation scale, small. Host float64
    (the random stream is the seed's, whatever the arithmetic).
    """
    g = rng.standard_normal((m, n))
    g -= g.max(axis=1, keepdims=True)
    e = np.exp(g)
    return e / e.sum(axis=1, keepdims=True)


def logit_preimages(E_S, ell, ar: Arithmetic = FLOAT64):
    """Minimum-norm ``u^(t)`` with ``E^(t) u^(t) = ℓ^(t)`` for each example, shape (m, d).

    ``E_S`` (m, n, d) has full row rank per example (A2).
    """
    return ar.min_norm_rows(E_S, ell)


def claim1_factors(E_S, X_S, s, ar: Arithmetic = FLOAT64):
    """Factors ``(K, Q)`` of Claim 1's ``W_S = K Q^T`` for examples ``E_S`` (m, n, d), ``X_S`` (m, d).

    Returns:
        ``K = U (X_S^T X_S)^{-1}`` and ``Q = X_S^T``, each of shape (d, m).
    """
    U = logit_preimages(E_S, ar.log(s), ar)              # (m, d): the u^(t) as rows
    Xs = ar.copy(X_S.T)                                  # (d, m)
    return ar.inverse_gram_times(Xs, U), Xs
