"""Stage 2: split the examples into head groups (docs/math.md §4.2).

``G_1`` holds ``k`` examples and ``G_2, G_3, …`` hold ``k − 1`` each (the last may be smaller),
taken in the dataset's order. Instead of A1 (Kruskal rank, NP-hard to check) the construction
needs only what it uses, checkable in polynomial time: each ``X_{G_h}`` has full column rank, and
for ``h ≥ 2`` every earlier query lies outside ``span X_{G_h}`` (then Lemma 3's direction ``b``
separates it). A1 implies both for any partition.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError
from .arith import EPS, FLOAT64, numerical_rank, rank_tol



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
    dist = _row_norms(V - (V @ Q) @ Q.T)
    s_max = FLOAT64.norm2(X_S) if X_S.size else 0.0
    scale = np.maximum(s_max, _row_norms(V))
    return dist, 2 * (m + 1) * d * EPS * scale


def _row_norms(A: np.ndarray) -> np.ndarray:
    """Each row's 2-norm, each row scaled by its largest entry first: squares of entries below
    1e-154 underflow, and a distance of 1e-200 read as 0 named a query "in the span" of others."""
    top = np.abs(A).max(axis=1, initial=0.0) if A.size else np.zeros(A.shape[0])
    safe = np.where(top > 0, top, 1.0)
    return FLOAT64.vector_norm(A / safe[:, None], axis=1) * top


# How many violations the error lists before it counts the rest.
_SHOWN = 5


def partition(X: np.ndarray, k: int, shifted: bool = False) -> list[range]:
    """Partition the examples with queries ``X`` (T, d) into groups satisfying §4.2's condition.

    ``shifted``: ``X`` are the queries shifted by their contexts' means (Proposition 4's
    pre-layer), and the error says so (A3, not A1; no pre-layer to suggest).

    Returns:
        The groups as consecutive ranges of example indices.

    Raises:
        InputError: a summary line, the first :data:`_SHOWN` violations (the examples and groups
            involved), how many there are, and what would build instead (:func:`remedies`).
    """
    problems = violations(X, k, shifted)
    if problems:
        raise refusal(X, k, problems, shifted)
    return group_ranges(X.shape[0], k)


def violations(X: np.ndarray, k: int, shifted: bool = False) -> list[str]:
    """One line per violation of §4.2's condition by the queries ``X`` (T, d); empty when none.

    The condition does not depend on the queries' scale: beyond ``2^±64`` they are tested at unit
    scale (divided by a power of two, as the build itself takes them), where their norms neither
    overflow nor underflow; the distances are reported at the queries' own scale."""
    name, query, queries = ("x + mean(E)", "shifted query", "shifted queries") if shifted else ("X", "query", "queries")
    top = float(np.abs(X).max(initial=0.0))
    e = int(np.frexp(top)[1]) if 0 < top < np.inf and not 2.0 ** -64 <= top <= 2.0 ** 64 else 0
    X = np.ldexp(X, -e) if e else X
    problems: list[str] = []
    for h, G in enumerate(group_ranges(X.shape[0], k), start=1):
        X_S = X[G.start:G.stop]
        rank, _ = numerical_rank(X_S.T)
        if rank < len(G):
            bad = _dependent_members(X_S, G.start) or list(G)
            problems.append(f"{name}: the {queries} of group G_{h} (examples {G.start}..{G.stop - 1}) are linearly "
                            f"dependent (rank {rank} < {len(G)}); dependent: example(s) {bad}")
            continue
        if h == 1:
            continue
        resid, tol = span_distances(X_S, X[:G.start])
        for t in np.flatnonzero(resid <= tol):
            problems.append(f"{name}: the {query} of example {int(t)} lies in the span of the {queries} of "
                            f"group G_{h} (examples {G.start}..{G.stop - 1}), distance {math.ldexp(float(resid[t]), e):.3g}")
    return problems


def refusal(X: np.ndarray, k: int, problems: list[str], shifted: bool = False,
            advice: list[str] | None = None) -> InputError:
    """The error for :func:`violations`' ``problems``: the first :data:`_SHOWN`, how many, and
    ``advice`` (by default :func:`remedies`)."""
    shown = problems[:_SHOWN] + ([f"… and {len(problems) - _SHOWN} more like these"]
                                 if len(problems) > _SHOWN else [])
    assumption = ("A3: the queries shifted by their contexts' means (Proposition 4's pre-layer), any "
                  f"{k} of them linearly independent" if shifted else f"A1 (any {k} of them linearly independent)")
    return InputError(shown + _query_scales(X, shifted) + (remedies(X, k, shifted) if advice is None else advice),
                      what=f"the {'shifted queries' if shifted else 'queries'} do not meet {assumption}: "
                           f"{len(problems)} violation(s) found while splitting the examples into head groups "
                           "(docs/math.md §4.2)", counted=False)


def _query_scales(X: np.ndarray, shifted: bool) -> list[str]:
    """A line where the queries' sizes span more than float64's precision can combine: then
    queries independent in exact arithmetic can test as dependent. Sizes as each query's largest
    entry (a norm can overflow)."""
    top = np.abs(X).max(axis=1, initial=0.0) if X.size else np.zeros(0)
    exponents = np.frexp(top[top > 0])[1]
    if exponents.size < 2 or exponents.max() - exponents.min() <= 53:
        return []
    span = int(exponents.max() - exponents.min())
    name = "the shifted queries x + mean(E)" if shifted else "the queries"
    return [f"{name} differ in size by a factor of at least 2^{span - 1} (about 1e{int((span - 1) * 0.30103)}), "
            "more than float64's 53 bits combine: queries independent in exact arithmetic can test as "
            "dependent here (the ranks in these lines are float64's); bring them towards one size"]


def refuse_identical_inputs(E: np.ndarray, X: np.ndarray, Y: np.ndarray) -> None:
    """Raise :class:`InputError` when examples share the same inputs: the same query and the same
    context tokens, in any order (attention sees a context as a set of tokens: reordering them
    reorders the logits and the softmax alike, and ``E^T s`` is the same).

    Nothing tells them apart, no layer before the attention either: with different labels no
    model memorizes them all; with the same label they are one example given more than once.
    """
    T = X.shape[0]
    if T < 2:                                             # (and np.unique on rows of huge d is costly)
        return
    _, query, counts = np.unique(X.reshape(T, -1), axis=0, return_inverse=True, return_counts=True)
    query = query.reshape(-1)
    shared = np.flatnonzero(counts[query] > 1)            # examples whose query another one has
    if shared.size == 0:
        return
    # Their contexts compared by value (+ 0.0 turns −0.0 into 0.0) as sets of tokens: every token
    # numbered by one sort of the tokens as bytes, a context by its numbers in increasing order.
    tokens = np.ascontiguousarray(E[shared].reshape(-1, E.shape[-1]) + 0.0)
    number = np.unique(tokens.view(np.dtype((np.void, tokens.itemsize * tokens.shape[1]))).reshape(-1),
                       return_inverse=True)[1].reshape(shared.size, -1)
    context = np.unique(np.sort(number, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    _, same, sizes = np.unique(np.stack([query[shared], context], axis=1), axis=0, return_inverse=True,
                               return_counts=True)
    same = same.reshape(-1)
    groups = [[int(t) for t in shared[same == g]] for g in np.flatnonzero(sizes > 1)]
    if not groups:
        return
    lines = []
    for g in sorted(groups)[:_SHOWN]:
        who = (f"examples {g[0]} and {g[1]}" if len(g) == 2 else
               f"examples {', '.join(map(str, g[:4]))}{', …' if len(g) > 4 else ''} ({len(g)} in all)")
        if all(np.array_equal(Y[t], Y[g[0]]) for t in g):
            lines.append(f"{who} have the same inputs (query x, and context E up to the order of its tokens, which "
                         "attention does not see) and the same label: one example "
                         "given more than once; drop the duplicates")
        else:
            reordered = not all(np.array_equal(E[t], E[g[0]]) for t in g)
            lines.append(f"{who} have the same inputs (query x, and context E up to the order of its tokens, which "
                         "attention does not see) but different labels: no model, "
                         "of any size, memorizes them all (it has one output for one input)"
                         + ("; their tokens come in different orders: a positional encoding added to the tokens "
                            "makes the order part of the input" if reordered else ""))
    if len(groups) > _SHOWN:
        lines.append(f"… and {len(groups) - _SHOWN} more groups like these")
    raise InputError(lines, what=f"{sum(map(len, groups))} examples share their inputs with another",
                     counted=False)


def remedies(X: np.ndarray, k: int, shifted: bool = False) -> list[str]:
    """What would build instead: lines for the error (``shifted``: ``X`` are the pre-layer's queries)."""
    _, first, counts = np.unique(X, axis=0, return_index=True, return_counts=True)
    repeated = int(np.sum(counts[counts > 1]))
    lines = []
    if shifted:
        if repeated:
            t = int(np.flatnonzero((X == X[first[np.argmax(counts)]]).all(axis=1))[0])
            twin = int(np.flatnonzero((X == X[t]).all(axis=1))[1])
            lines.append(f"{repeated} examples share their shifted query x + mean(E) with another (e.g. examples "
                         f"{t} and {twin}): the pre-layer does not tell them apart; another encoding of the tokens "
                         "(a positional encoding, say) can")
        else:
            r = numerical_rank(X.T)[0]
            if r >= 2:
                lines.append(f"what would build: if the shifted queries' Kruskal rank r is below {k} (their rank, "
                             f"{r}, bounds it), a head dimension d_h = r (Remark 1: --head-dim r) builds "
                             "H(r − 1) + 1 examples")
            else:                                       # d_h = 1 builds H·0 + 1 = 1 example
                lines.append(f"the shifted queries span at most a line (rank {r}): no head dimension helps; another "
                             "encoding of the tokens (a positional encoding, say) can")
        return lines
    if repeated:
        t = int(np.flatnonzero((X == X[first[np.argmax(counts)]]).all(axis=1))[0])
        twin = int(np.flatnonzero((X == X[t]).all(axis=1))[1])
        lines.append(f"what would build: {repeated} examples share their query with another (e.g. examples {t} "
                     f"and {twin}); equal queries can never be told apart by attention on the query alone. "
                     "Proposition 4: a first attention layer that adds to every token the mean of its context "
                     "makes them distinct when the shifted queries x + mean(E) have Kruskal rank ≥ n (A3, "
                     "which `assumptions` reports): build with --prelayer mean-shift (or auto)")
    else:
        r = numerical_rank(X.T)[0]
        shift = ("shift the queries by their contexts' means: --prelayer mean-shift (Proposition 4, when A3 holds "
                 "in `assumptions`)")
        if r >= 2:
            lines.append(f"what would build: if the queries' Kruskal rank r is below {k} (rank X = {r} bounds it), "
                         f"a head dimension d_h = r (Remark 1: --head-dim r) builds H(r − 1) + 1 examples; or {shift}")
        else:                                           # d_h = 1 builds H·0 + 1 = 1 example
            lines.append(f"what would build: the queries span at most a line (rank X = {r}), so no head dimension "
                         f"helps; {shift}")
    return lines
