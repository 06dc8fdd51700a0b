"""Lemma 5 (Weyl): if ``‖A − B‖_2 < σ_min⁺(A)`` then ``rank B ≥ rank A``.

``σ_min⁺(A)`` is the smallest singular value of ``A`` that its numerical rank counts.
"""

from __future__ import annotations

import numpy as np

from construct.arith import numerical_rank

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
    rank_B = numerical_rank(B)[0]
    sigma_plus = float(s_A[rank_A - 1]) if rank_A else 0.0
    gap = float(np.linalg.norm(A - B, 2))
    hyp = {"same shape": True, "‖A − B‖₂ < σ_min⁺(A)": gap < sigma_plus}
    q = {"rank_A": rank_A, "rank_B": rank_B, "norm_A_minus_B": gap, "sigma_min_plus_A": sigma_plus}
    return Check(STATEMENT, hyp, rank_B >= rank_A, q)
