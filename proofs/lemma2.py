"""Lemma 2: independent ``v_1..v_n`` stay independent as ``v_i + α·mean_j v_j`` for ``α ≠ −1``.

``[v_i + α·mean_j v_j] = (I + (α/n) 1 1^T) V`` and ``det(I + (α/n) 1 1^T) = 1 + α``; the smallest
singular value shrinks by at most ``min(1, |1 + α|)``.
"""

from __future__ import annotations

import numpy as np

from construct.arith import EPS, numerical_rank, rank_tol
from construct.errors import InputError

from .check import Check, arrays, one_blas_thread, real

STATEMENT = "Lemma 2"


def shifted(V: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """The vectors ``v_i + α·mean_j v_j`` for the rows ``v_i`` of ``V`` (n, d)."""
    V = np.asarray(V, dtype=float)
    return V + alpha * V.mean(axis=0, keepdims=True)


@one_blas_thread
def check(V: np.ndarray, alpha: float = 1.0) -> Check:
    """Lemma 2 for the rows of ``V`` (n, d) and the weight ``alpha``.

    Confirmed where the shifted rows' float64 rank is ``n``. Where it is below ``n``: no
    conclusion (undecided), not a counterexample, where the lemma's own lower bound ``min(1, |1 + α|)·σ_min(V)`` on the shifted
    rows' smallest singular value, less the rounding of forming them and of both SVDs, lies
    below their rank tolerance: float64 cannot see that the shift keeps them independent (``α``
    within about ``u`` of −1, so large that rounding ``α·mean`` swamps ``V``, or ``σ_min(V)``
    itself near the tolerance).

    Raises:
        InputError: ``V`` not an array of finite real numbers or without rows; ``alpha`` not a
            finite real number.
    """
    (V,) = arrays(V=(np.atleast_2d(V), "n d"))
    if V.size == 0:
        raise InputError(f"V: no rows to check, shape {V.shape}", what="invalid arrays")
    alpha = real(alpha, "alpha")
    if not np.isfinite(alpha):
        raise InputError(f"alpha must be a finite real number, got {alpha}", what="invalid option")
    n = V.shape[0]
    rank_V, s_V = numerical_rank(V)
    W = shifted(V, alpha)
    # W is formed from V: its rounding scales with V (and α), not with W, which can cancel (α = −1).
    _, s_W = numerical_rank(W)
    scale = max(float(s_W[0]) if s_W.size else 0.0, float(s_V[0]) * (1 + abs(alpha)) if s_V.size else 0.0)
    tol = rank_tol(scale, W.shape)
    rank_W = int(np.sum(s_W > tol))
    hyp = {"rows linearly independent": rank_V == n, "alpha ≠ −1": alpha != -1.0}
    sigma_V = float(s_V[-1]) if n <= V.shape[1] else 0.0
    factor = min(1.0, abs(1.0 + alpha))
    q = {"n": n, "rank_V": rank_V, "rank_shifted": rank_W, "sigma_min_V": sigma_V,
         "sigma_min_shifted": float(s_W[-1]) if n <= V.shape[1] else 0.0,
         "sigma_min_factor": factor, "rank_tolerance": tol}
    # What the lemma guarantees, above rounding; at α = −1 the rank does drop, and the check shows it.
    # The rounding: σ_min(V)'s SVD error, forming W (the mean's n terms, the product by α and the
    # sum, entry by entry) and W's SVD error.
    mean_abs = np.abs(V).mean(axis=0, keepdims=True)
    with np.errstate(over="ignore"):                 # inf at α near float64's top: undecided
        formed = float(np.linalg.norm((n + 2) * EPS * (np.abs(V) + abs(alpha) * mean_abs)))
    rounding = factor * rank_tol(float(s_V[0]), V.shape) + formed + rank_tol(float(s_W[0]), W.shape)
    q["rounding"] = rounding
    visible = alpha == -1.0 or factor * sigma_V - rounding > tol
    # A float64 rank n shows the lemma holding whatever the bound; only a rank below n needs the
    # bound to be a counterexample.
    return Check(STATEMENT, hyp, True if rank_W == n else (False if visible else None), q)
