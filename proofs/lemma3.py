"""Lemma 3: the rank-one separator ``W' = a b^T`` (construction in :mod:`construct.separator`).

``W' x^(t) = 0`` for the fitted examples ``S``, and ``E^(t) W' x^(t)`` has pairwise distinct
entries for every other example, so each saturates to one token (Lemma 4).

The paper assumes all queries have Kruskal rank ≥ n (A1), which is NP-hard to check; the proof
uses only two consequences, checked here instead: the queries of ``S`` are independent, and every
other query lies outside their span.
"""

from __future__ import annotations

import numpy as np

from construct.assumptions import a2_violations
from construct.arith import EPS, numerical_rank
from construct.partition import span_distances
from construct.limits import integer
from construct.separator import rank_one_separator, separator_logits

from .check import Check, arrays, one_blas_thread

STATEMENT = "Lemma 3"


@one_blas_thread
def check(X_S: np.ndarray, E_A: np.ndarray, X_A: np.ndarray, *, a: np.ndarray | None = None,
          b: np.ndarray | None = None, seed: int = 0) -> Check:
    """Lemma 3 for fitted queries ``X_S`` (m, d) and other examples ``E_A`` (p, n, d), ``X_A`` (p, d).

    Checks the given separator ``(a, b)``, or draws one with :func:`rank_one_separator`.

    Returns:
        A :class:`Check` whose quantities hold ``a``, ``b``, ``j_star`` and the gaps ``delta``.
    """
    X_S, E_A, X_A = arrays(X_S=(X_S, "m d"), E_A=(E_A, "p n d"), X_A=(X_A, "p d"))
    seed = integer(seed, "seed", 0)
    m, d = X_S.shape
    n = E_A.shape[1]
    rank_S = numerical_rank(X_S)[0]
    hyp = {
        "|S| ≤ n − 1": m <= n - 1,
        "queries of S linearly independent": rank_S == m,
        "other queries outside span X_S": bool(rank_S < m or np.all(np.greater(*span_distances(X_S, X_A)))),
        "contexts of the others have full row rank (A2)": a2_violations(E_A).size == 0 if E_A.size else True,
    }
    if a is None or b is None:
        if not hyp["queries of S linearly independent"] or m >= d:
            return Check(STATEMENT, hyp, None, {"m": m, "d": d})
        sep = rank_one_separator(X_S, E_A, X_A, np.random.default_rng(seed))
        a, b = sep.a, sep.b
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    # W' x = a (b·x) vanishes on S when b is orthogonal to span X_S up to the rounding of a
    # projection on that span (the bound of construct.partition.span_distances).
    zero_residual = float(np.linalg.norm(a) * np.abs(X_S @ b).max()) if m else 0.0
    zero_tol = 2 * (m + 1) * d * EPS * float(np.linalg.norm(X_S, 2) * np.linalg.norm(a) * np.linalg.norm(b))
    g = separator_logits(E_A, X_A, a, b)
    if g.size and n > 1:
        srt = np.sort(g, axis=1)
        gaps = np.diff(srt, axis=1)
        min_gap = float(gaps.min())
        # Entries count as distinct when they differ by more than their rounding.
        distinct = bool(np.all(gaps > n * EPS * np.abs(srt).max(axis=1, keepdims=True)))
        j_star, delta = np.argmax(g, axis=1), srt[:, -1] - srt[:, -2]
    else:
        min_gap, distinct = float("inf"), True
        j_star, delta = np.argmax(g, axis=1) if g.size else np.zeros(0, int), np.full(g.shape[0], np.inf)
    q = {"zero_residual": zero_residual, "zero_tol": zero_tol, "min_pairwise_gap": min_gap,
         "delta_min": float(delta.min()) if delta.size else float("inf"),
         "a": a, "b": b, "j_star": j_star, "delta": delta}
    return Check(STATEMENT, hyp, bool(zero_residual <= zero_tol and distinct), q)
