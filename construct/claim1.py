"""Claim 1: one head realizes any interior attention targets on ``m ≤ min(n, d_h)`` examples.

With ``ℓ^(t) = log s^(t)``, ``u^(t) = E^(t)+ ℓ^(t)`` (right pseudo-inverse) and
``W_S = U (X_S^T X_S)^{-1} X_S^T``, we get ``W_S x^(t) = u^(t)`` and
``softmax(E^(t) W_S x^(t)) = s^(t)``. ``W_S`` is returned factored as ``K Q^T`` with
``K = U (X_S^T X_S)^{-1}`` and ``Q = X_S``, the first columns of ``W_K`` and ``W_Q``.
"""

from __future__ import annotations

import numpy as np

from . import precision
from .linalg import gram_solve


def interior_targets(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """Random interior targets in the simplex, shape (m, n): softmax of standard normal logits.

    Gaussian logits keep ``‖log s‖_∞`` moderate (a Dirichlet draw can put mass 1e-6 on a token),
    which keeps the logits ``ℓ`` of Lemma 4, and so the saturation scale, small.
    """
    g = rng.standard_normal((m, n))
    g -= g.max(axis=1, keepdims=True)
    e = np.exp(g)
    return e / e.sum(axis=1, keepdims=True)


def logit_preimages(E_S: np.ndarray, ell: np.ndarray) -> np.ndarray:
    """Minimum-norm ``u^(t)`` with ``E^(t) u^(t) = ℓ^(t)`` for each example, shape (m, d).

    ``E_S`` (m, n, d) has full row rank per example (A2); solved through the QR of ``E^(t)T``.
    """
    if precision.is_mp(E_S):                            # u = E^T (E E^T)^{-1} ℓ at high precision
        return np.stack([E.T @ precision.gram_solve_rows(E, l) for E, l in zip(E_S, ell)])
    Q, R = np.linalg.qr(np.swapaxes(E_S, 1, 2))          # E^T = Q R, Q (m, d, n), R (m, n, n)
    y = np.linalg.solve(np.swapaxes(R, 1, 2), ell[..., None])  # R^T y = ℓ
    return (Q @ y)[..., 0]


def claim1_factors(E_S: np.ndarray, X_S: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Factors ``(K, Q)`` of Claim 1's ``W_S = K Q^T`` for examples ``E_S`` (m, n, d), ``X_S`` (m, d).

    Returns:
        ``K = U (X_S^T X_S)^{-1}`` and ``Q = X_S^T``, each of shape (d, m).
    """
    U = logit_preimages(E_S, precision.log(s))           # (m, d)
    Xs = X_S.T                                           # (d, m)
    if precision.is_mp(Xs):
        return precision.solve(Xs.T @ Xs, U).T, Xs.copy()
    _, R = np.linalg.qr(Xs)
    # U holds the u^(t) as rows; (X^T X)^{-1} = R^{-1} R^{-T}, so K^T = R^{-1} R^{-T} U.
    K = gram_solve(R, U).T
    return K, Xs.copy()
