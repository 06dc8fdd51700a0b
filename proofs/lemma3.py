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
        A :class:`Check` whose quantities hold ``a``, ``b``, ``j_star`` and the gaps ``delta``;
        no conclusion (undecided) where the rounding of ``E^(t) a`` or ``b·x^(t)`` could hide a
        tie of the exact entries.
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
        distinct = _distinct(E_A, X_A, a, b)
        j_star, delta = np.argmax(g, axis=1), srt[:, -1] - srt[:, -2]
    else:
        min_gap, distinct = float("inf"), True
        j_star, delta = np.argmax(g, axis=1) if g.size else np.zeros(0, int), np.full(g.shape[0], np.inf)
    q = {"zero_residual": zero_residual, "zero_tol": zero_tol, "min_pairwise_gap": min_gap,
         "delta_min": float(delta.min()) if delta.size else float("inf"),
         "a": a, "b": b, "j_star": j_star, "delta": delta}
    if not zero_residual <= zero_tol:
        return Check(STATEMENT, hyp, False, q)
    return Check(STATEMENT, hyp, distinct, q)


def _distinct(E_A: np.ndarray, X_A: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool | None:
    """Whether every example's ``E^(t) a (b·x^(t))`` has pairwise distinct entries in exact
    arithmetic: the factors ``E^(t) a`` distinct and ``b·x^(t) ≠ 0``. Each dot product of ``d``
    terms is within ``d ε`` times its sum of absolute terms of the computed one, so the answer
    is decided where the computed values are farther apart (from each other, from 0) than those
    bounds (True), or where entries that tie are exactly 0 (False). None where rounding could
    hide a tie (``e_1·a = 1e16 + 1 − 1e16`` rounds to 0 and ``e_2·a = 1`` exactly: they tie,
    float64 sees a gap of 1)."""
    d = E_A.shape[2]
    Ea, beta = E_A @ a, X_A @ b
    err_Ea, err_beta = d * EPS * (np.abs(E_A) @ np.abs(a)), d * EPS * (np.abs(X_A) @ np.abs(b))
    order = np.argsort(Ea, axis=1)
    v, e = np.take_along_axis(Ea, order, axis=1), np.take_along_axis(err_Ea, order, axis=1)
    gaps, room = np.diff(v, axis=1), e[:, 1:] + e[:, :-1]
    # Sorted by value, intervals of which each neighbour pair is apart are all apart.
    if np.all(gaps > room) and np.all(np.abs(beta) > err_beta):
        return True
    if np.any((gaps == 0) & (room == 0)) or np.any((beta == 0) & (err_beta == 0)):
        return False                                  # entries that are exactly 0 (all their terms are)
    return None
