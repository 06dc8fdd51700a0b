"""Stage 2: split the examples into head groups (MATH.md §4.2).

``G_1`` holds ``k`` examples and ``G_2, G_3, …`` hold ``k − 1`` each (the last may be smaller),
taken in the dataset's order. Instead of A1 (Kruskal rank, NP-hard to check) the construction
needs only what it uses, checkable in polynomial time: each ``X_{G_h}`` has full column rank, and
for ``h ≥ 2`` every earlier query lies outside ``span X_{G_h}`` (then Lemma 3's direction ``b``
separates it). A1 implies both for any partition.
"""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .arith import EPS, FLOAT64, numerical_rank, rank_tol

_MAX_REPORTED = 20


def group_ranges(T: int, k: int) -> list[range]:
    """Consecutive example ranges: the first of size ``k``, then ``k − 1`` each (``k ≥ 2``, or ``T = 1``)."""
    groups = [range(0, min(k, T))]
    while groups[-1].stop < T:
        start = groups[-1].stop
        groups.append(range(start, min(start + k - 1, T)))
    return groups


def _dependent_members(X_S: np.ndarray, first: int) -> list[int]:
    """Examples of a group whose query lies in the span of the group's other queries."""
    out = []
    for j in range(X_S.shape[0]):
        others = np.delete(X_S, j, axis=0)
        x = X_S[j]
        dist = FLOAT64.least_squares_residual(others.T, x)
        if dist <= rank_tol(max(FLOAT64.norm2(X_S), 1e-300), X_S.shape):
            out.append(first + j)
    return out


def span_distances(X_S: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distance of each row of ``V`` (p, d) to the span of the rows of ``X_S`` (m, d), full row rank.

    Returns:
        The distances, shape (p,), and the tolerance below which each counts as zero: the
        rounding bound of the projection, ``2(m + 1) d ε`` times the larger of ``‖X_S‖_2`` and
        ``‖v‖`` (measured worst case on random spans: about half of it).
    """
    m, d = X_S.shape
    Q = FLOAT64.span_projector(X_S.T)
    dist = FLOAT64.vector_norm(V - (V @ Q) @ Q.T, axis=1)
    s_max = FLOAT64.norm2(X_S) if X_S.size else 0.0
    scale = np.maximum(s_max, FLOAT64.vector_norm(V, axis=1))
    return dist, 2 * (m + 1) * d * EPS * scale


def partition(X: np.ndarray, k: int) -> list[range]:
    """Partition the examples with queries ``X`` (T, d) into groups satisfying §4.2's condition.

    Returns:
        The groups as consecutive ranges of example indices.

    Raises:
        InputError: every violation, naming the examples and groups involved (duplicate or
            linearly dependent queries, typically).
    """
    T = X.shape[0]
    groups = group_ranges(T, k)
    problems: list[str] = []
    for h, G in enumerate(groups, start=1):
        X_S = X[G.start:G.stop]
        rank, _ = numerical_rank(X_S.T)
        if rank < len(G):
            bad = _dependent_members(X_S, G.start) or list(G)
            problems.append(f"X: the queries of group G_{h} (examples {G.start}..{G.stop - 1}) are linearly "
                            f"dependent (rank {rank} < {len(G)}); dependent: example(s) {bad}")
            continue
        if h == 1:
            continue
        resid, tol = span_distances(X_S, X[:G.start])
        inside = np.flatnonzero(resid <= tol)
        for t in inside[:_MAX_REPORTED]:
            problems.append(f"X: the query of example {int(t)} lies in the span of the queries of group G_{h} "
                            f"(examples {G.start}..{G.stop - 1}), distance {resid[t]:.3g}; duplicate or "
                            "dependent queries break Lemma 3's separation")
        if len(inside) > _MAX_REPORTED:
            problems.append(f"X: … and {len(inside) - _MAX_REPORTED} more earlier queries inside span of G_{h}")
    if problems:
        raise InputError(problems, what="the examples cannot be partitioned for the construction (MATH.md §4.2)")
    return groups
