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
        numerical ranks), ``sigma_lower_bound`` and ``ranks_visible``. The ``r = rank A + rank C``
        singular values that the lemma promises ``M`` are at least
        ``σ_A σ_C / (max(σ_A, σ_C) + ‖B‖_2)`` (``σ_A``, ``σ_C`` the smallest singular values the
        blocks' ranks count): compressing ``M`` onto the blocks' singular vectors gives
        ``[[Σ_A, B'], [0, Σ_C]]``, whose inverse has norm at most ``1/min(σ_A, σ_C) + ‖B‖/(σ_A σ_C)``.
        Where that bound lies within ``M``'s rank tolerance (and the SVD's error, of its size)
        float64 cannot see those singular values, and a float64 rank of ``M`` short of ``r`` is
        no counterexample: no conclusion (undecided); a float64 rank that reaches ``r`` is
        confirmed whatever the bound. The bound falls that low when
        the blocks' scales differ by more than ``1/ε`` (``[[1e-10, 1e10], [0, 1]]``), and also
        when they do not but ``B`` makes ``M`` itself that ill-conditioned (``[[1, 1e10], [0, 1]]``,
        rank 2, float64 rank 1).
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
    # The lemma's r = rank A + rank C singular values of M are at least the bound below (in exact
    # arithmetic), each block's counted singular value lowered by its SVD's error and ‖B‖ raised by
    # its own. Where the bound is within twice M's tolerance (the tolerance and the error of M's
    # own SVD), float64 cannot see them: blocks of very different scales, or a B that makes M
    # ill-conditioned on its own.
    low_A = float(s_A[rank_A - 1]) - rank_tol(float(s_A[0]), A.shape) if rank_A else np.inf
    low_C = float(s_C[rank_C - 1]) - rank_tol(float(s_C[0]), C.shape) if rank_C else np.inf
    norm_B = float(np.linalg.norm(B, 2)) if B.size else 0.0
    norm_B += rank_tol(norm_B, B.shape)
    if not (rank_A and rank_C):
        lower = min(low_A, low_C)                           # one block: its own singular values
    else:
        lower = low_A * low_C / (max(low_A, low_C) + norm_B) if min(low_A, low_C) > 0 else 0.0
    seen = bool(lower > 2 * tol_M)
    q["sigma_lower_bound"] = lower
    q["ranks_visible"] = seen                # the lemma's singular values are visible at M's scale
    # A float64 rank of M that reaches rank A + rank C shows the lemma holding, whatever the
    # bound; only one short of it needs the bound to be a counterexample.
    holds = rank_M >= rank_A + rank_C
    return Check(STATEMENT, {"blocks conform": True}, True if holds else (False if seen else None), q)
