"""Lemma 1: ``rank [[A, B], [0, C]] ≥ rank A + rank C``."""

from __future__ import annotations

import numpy as np

from construct.arith import numerical_rank, rank_tol

from .check import Check, arrays, one_blas_thread

STATEMENT = "Lemma 1"


@one_blas_thread
def check(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> Check:
    """Lemma 1 for blocks ``A`` (p, q), ``B`` (p, r), ``C`` (s, r).

    Returns:
        A :class:`Check` with the ranks of ``M = [[A, B], [0, C]]``, ``A`` and ``C`` (float64
        numerical ranks, and ``ranks_visible``); no conclusion (undecided) where a singular value
        that ``A`` or ``C`` counts lies below ``M``'s rank tolerance. An ``M`` whose own condition number is beyond ``1/u``
        (``[[1, 1e10], [0, 1]]``) has a float64 rank below its exact one: the check reports
        what float64 sees there.
    """
    # Each block's own axes (p, q, …): blocks that do not conform fail a hypothesis, not the input.
    A, B, C = arrays(A=(np.atleast_2d(A), "p q"), B=(np.atleast_2d(B), "p2 r"), C=(np.atleast_2d(C), "s r2"))
    conform = A.shape[0] == B.shape[0] and B.shape[1] == C.shape[1]
    q = {"shape_A": A.shape, "shape_B": B.shape, "shape_C": C.shape}
    if not conform:
        return Check(STATEMENT, {"blocks conform": False}, None, q)
    M = np.block([[A, B], [np.zeros((C.shape[0], A.shape[1])), C]])
    (rank_M, s_M), (rank_A, s_A), (rank_C, s_C) = (numerical_rank(v) for v in (M, A, C))
    q.update(rank_M=rank_M, rank_A=rank_A, rank_C=rank_C)
    # Each rank is decided relative to its own matrix's largest singular value. A singular value
    # that A or C counts but that lies below M's tolerance is one float64 cannot see in M (blocks
    # of very different scales): the numbers cannot decide the inequality there.
    tol_M = rank_tol(float(s_M[0]) if s_M.size else 0.0, M.shape)
    seen = bool(np.all(s_A[:rank_A] > tol_M) and np.all(s_C[:rank_C] > tol_M))
    q["ranks_visible"] = seen                # the ranks of A and C are visible at M's scale
    return Check(STATEMENT, {"blocks conform": True}, rank_M >= rank_A + rank_C if seen else None, q)
