"""Lemma 5 (Weyl): if ``‖A − B‖_2 < σ_min⁺(A)`` then ``rank B ≥ rank A``.

``σ_min⁺(A)`` is the smallest singular value of ``A`` that its numerical rank counts, and both
ranks are numerical ones (the convention of every check, :mod:`proofs.check`): the statement
checked is Weyl's for the singular values float64 can resolve. A matrix's exact rank can exceed
its numerical one: ``A = diag(1, 1e-17)`` has rank 2 and ``σ⁺ = 1e-17`` exactly, so with
``B = diag(1, 0)`` the exact hypothesis fails; numerically ``A`` has rank 1 and ``σ⁺ = 1``, the
hypothesis holds, and so does the conclusion (rank 1 ≥ 1).

Weyl gives ``σ_r(B) ≥ σ_min⁺(A) − ‖A − B‖_2`` (``r = rank A``). Where that margin, less the
rounding of the numbers it is computed from, is within ``B``'s rank tolerance (and its SVD's
error), float64 cannot see ``B``'s ``r``-th singular value: a float64 rank of ``B`` below ``r``
is then no counterexample, and the check is undecided.
"""

from __future__ import annotations

import numpy as np

from construct.arith import numerical_rank, rank_tol

from .check import Check, arrays, one_blas_thread

STATEMENT = "Lemma 5"


@one_blas_thread
def check(A: np.ndarray, B: np.ndarray) -> Check:
    """Lemma 5 for matrices ``A`` and ``B`` of one shape."""
    # Each its own axes: a shape mismatch fails a hypothesis, not the input.
    A, B = arrays(A=(np.atleast_2d(A), "p q"), B=(np.atleast_2d(B), "p2 q2"))
    if A.shape != B.shape:
        return Check(STATEMENT, {"same shape": False}, None, {"shape_A": A.shape, "shape_B": B.shape})
    rank_A, s_A = numerical_rank(A)
    rank_B, s_B = numerical_rank(B)
    sigma_plus = float(s_A[rank_A - 1]) if rank_A else 0.0
    gap = float(np.linalg.norm(A - B, 2))
    hyp = {"same shape": True, "‖A − B‖₂ < σ_min⁺(A)": gap < sigma_plus}
    # Weyl's lower bound on σ_r(B), less the errors of σ⁺(A)'s SVD and of ‖A − B‖₂ (forming A − B
    # and its SVD); visible when above B's rank tolerance plus its SVD's error.
    margin = sigma_plus - gap - rank_tol(float(s_A[0]) if s_A.size else 0.0, A.shape) - 2 * rank_tol(gap, A.shape)
    visible = margin > 2 * rank_tol(float(s_B[0]) if s_B.size else 0.0, B.shape)
    q = {"rank_A": rank_A, "rank_B": rank_B, "norm_A_minus_B": gap, "sigma_min_plus_A": sigma_plus,
         "weyl_margin": margin}
    holds = rank_B >= rank_A
    return Check(STATEMENT, hyp, None if not holds and hyp["‖A − B‖₂ < σ_min⁺(A)"] and not visible else holds, q)
