"""Claim 1: one head fits ``m ≤ min(n, d_h)`` examples' attention exactly (:mod:`construct.claim1`).

``W_S = U (X_S^T X_S)^{-1} X_S^T`` with ``u^(t) = E^(t)+ log s^(t)`` gives
``softmax(E^(t) W_S x^(t)) = s^(t)`` for any interior targets, and ``rank W_S ≤ m``.
"""

from __future__ import annotations

import numpy as np

from construct.assumptions import a2_violations
from construct.claim1 import claim1_factors
from construct.arith import numerical_rank
from construct.limits import integer
from construct.model import head_attention

from .check import (CONFIRM_TOL, Check, arrays, factored_rank, logit_radius, one_blas_thread, target_error,
                    target_tol)

STATEMENT = "Claim 1"


def hypotheses(E_S: np.ndarray, X_S: np.ndarray, s: np.ndarray, d_h: int | None = None) -> dict[str, bool]:
    """Claim 1's hypotheses for ``E_S`` (m, n, d), ``X_S`` (m, d), targets ``s`` (m, n)."""
    m, n, _ = E_S.shape
    return {
        "m ≤ n": m <= n,
        "m ≤ d_h": d_h is None or m <= d_h,
        "queries linearly independent": numerical_rank(X_S)[0] == m,
        "contexts have full row rank (A2)": a2_violations(E_S).size == 0,
        "targets strictly positive, rows sum to 1": bool(
            s.shape == (m, n) and np.all(s > 0) and np.allclose(s.sum(axis=1), 1.0, rtol=0, atol=n * 1e-15)),
    }


@one_blas_thread
def check(E_S: np.ndarray, X_S: np.ndarray, s: np.ndarray, d_h: int | None = None) -> Check:
    """Claim 1 on examples ``E_S`` (m, n, d), ``X_S`` (m, d) with targets ``s`` (m, n).

    Returns:
        A :class:`Check` with the factors ``W_K``, ``W_Q`` (d, m), ``target_error`` (the largest
        error of a probability relative to its target, :func:`proofs.check.target_error`) and
        ``rank W_S``; no conclusion (undecided) where the targets' relative tolerance ``tol``,
        grown with the logits' rounding (nearly dependent queries make ``W_S`` large), reaches 1
        (a probability could then be off by a factor of 2), nor where it exceeds
        :data:`proofs.check.CONFIRM_TOL` and the fit lies within it (too coarse to call it exact).
    """
    E_S, X_S, s = arrays(E_S=(E_S, "m n d"), X_S=(X_S, "m d"), s=(s, "m n"))
    d_h = None if d_h is None else integer(d_h, "d_h")
    hyp = hypotheses(E_S, X_S, s, d_h)
    if not (hyp["queries linearly independent"] and hyp["contexts have full row rank (A2)"]
            and hyp["targets strictly positive, rows sum to 1"]):
        return Check(STATEMENT, hyp, None, {})
    K, Q = claim1_factors(E_S, X_S, s)
    err = target_error(head_attention(E_S, X_S, K, Q), s)
    tol = target_tol(logit_radius(E_S, X_S, K, Q).max(initial=0.0))
    rank_W = factored_rank(K, Q)
    m = E_S.shape[0]
    q = {"target_error": err, "tol": tol, "rank_W": rank_W, "m": m, "W_K": K, "W_Q": Q}
    holds = bool(err <= tol and rank_W <= m)
    if tol >= 1 or (holds and tol > CONFIRM_TOL):     # too coarse to decide, or to call the fit exact
        return Check(STATEMENT, hyp, None, q)
    return Check(STATEMENT, hyp, holds, q)
