"""Lemma 1: ``rank [[A, B], [0, C]] ≥ rank A + rank C``."""

from __future__ import annotations

import numpy as np

from construct.arith import numerical_rank

from .check import Check

STATEMENT = "Lemma 1"


def check(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> Check:
    """Lemma 1 for blocks ``A`` (p, q), ``B`` (p, r), ``C`` (s, r).

    Returns:
        A :class:`Check` with the ranks of ``M = [[A, B], [0, C]]``, ``A`` and ``C``.
    """
    A, B, C = (np.atleast_2d(np.asarray(v, dtype=float)) for v in (A, B, C))
    conform = A.shape[0] == B.shape[0] and B.shape[1] == C.shape[1]
    q = {"shape_A": A.shape, "shape_B": B.shape, "shape_C": C.shape}
    if not conform:
        return Check(STATEMENT, {"blocks conform": False}, None, q)
    M = np.block([[A, B], [np.zeros((C.shape[0], A.shape[1])), C]])
    rank_M, rank_A, rank_C = (numerical_rank(v)[0] for v in (M, A, C))
    q.update(rank_M=rank_M, rank_A=rank_A, rank_C=rank_C)
    return Check(STATEMENT, {"blocks conform": True}, rank_M >= rank_A + rank_C, q)
