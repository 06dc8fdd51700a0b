"""Stage 1: the request against Theorem 1's hypotheses, and what a build will hold in memory."""

from __future__ import annotations

import numpy as np

from .assumptions import a2_violations
from .data import Dataset
from .errors import CapacityError, InputError
from .limits import index_list
from .model import capacity, heads_needed


def validate(data: Dataset, H: int, d_h: int, d_v: int) -> int:
    """Stage 1: check the request against Theorem 1's hypotheses; returns ``k``.

    Raises:
        CapacityError: ``T > H(k − 1) + 1`` (the message says how many heads would suffice).
        InputError: every other problem, listed at once: non-positive sizes, ``n > d``,
            ``d_o > d_v`` or ``d_o > d``, contexts without full row rank (A2), by example.
    """
    problems = [f"{name} must be a positive integer, got {v}" for name, v in
                (("heads H", H), ("head dim d_h", d_h), ("value dim d_v", d_v)) if v < 1]
    if problems:
        raise InputError(problems, what="invalid model shape")
    T, n, d, d_o = data.T, data.n, data.d, data.d_o
    k = min(n, d_h)
    if n > d:
        problems.append(f"E: context size n = {n} exceeds token dimension d = {d}; A2 needs n ≤ d")
    if d_o > d_v:
        problems.append(f"Y: d_o = {d_o} output columns need value dim d_v ≥ {d_o}, got d_v = {d_v}")
    if d_o > d:
        problems.append(f"Y: d_o = {d_o} output columns exceed the token dimension d = {d}")
    a2 = a2_problem(data)
    if a2:
        problems.append(a2)
    cap = capacity(H, n, d_h)
    if T > cap:
        need = heads_needed(T, k)
        hint = ("more heads do not help while n > d (above)" if n > d
                else f"{need} heads would suffice" if need is not None
                else "no number of heads suffices with k = 1; " + (
                    "raise the head dim (d_h ≥ 2)" if n >= 2 else
                    "contexts of one token separate nothing: give contexts of at least 2 tokens"))
        problems.append(f"T = {T} examples exceed the capacity H(k−1)+1 = {cap} of H = {H} heads "
                        f"with k = min(n = {n}, d_h = {d_h}) = {k}; {hint}")
        raise CapacityError(problems, what="dataset over capacity")
    if problems:
        raise InputError(problems, what="the dataset does not meet Theorem 1's hypotheses")
    return k


def memory_estimate(data: Dataset, H: int, d_h: int, d_v: int) -> int:
    """Bytes a float64 build holds at its peak, about: ``Z`` and its copy in the final check,
    two ``T × T`` triangular factors (the row-space factor's, grown in place, and the check's),
    the data three times over, the weights, and every head's ``d × d`` key map (the rounding
    detector's second evaluation). An upper estimate: at H = 256 (n = 32, d = 64) it is 3.4 Z
    where the build's peak measured 1.6 Z."""
    T, n, d = data.T, data.n, data.d
    return 8 * (2 * T * H * d + 2 * T * T + 3 * T * (n * d + d + data.d_o) + H * d * (2 * d_h + d_v) + H * d * d)


def a2_problem(data: Dataset) -> str | None:
    """The line that names the contexts failing A2 (full row rank), or None (also where ``n > d``:
    that has a line of its own)."""
    n = data.n
    if n > data.d:
        return None
    bad = a2_violations(data.E)
    if not bad.size:
        return None
    return (f"E: context of example(s) {index_list(bad)} is not of full row rank to float64's precision "
            f"(A2 needs rank E^(t) = n = {n}: distinct, linearly independent tokens); what would "
            "build: remove or perturb the repeated (or dependent) tokens, or add a positional "
            "encoding to the tokens, which tells a token at two positions apart" + _column_scales(data.E)
            + _token_scales(data.E, bad))


def _token_scales(E, bad) -> str:
    """Where a failing context's tokens differ in size by more than float64's precision can
    combine, say so: then the context can be of full rank in exact arithmetic (nothing repeats)
    and not in float64. Sizes as each token's largest entry (a norm can overflow)."""
    top = np.abs(E[bad]).max(axis=2)                             # (failing contexts, n)
    spans = [int(np.ptp(np.frexp(row[row > 0])[1])) if np.count_nonzero(row) > 1 else 0 for row in top]
    wide = [(int(t), span) for t, span in zip(bad, spans) if span > 53]
    if not wide:
        return ""
    t, span = max(wide, key=lambda pair: pair[1])
    others = f" (and of {len(wide) - 1} more of these examples)" if len(wide) > 1 else ""
    return (f"; the tokens of example {t}{others} differ in size by a factor of at least 2^{span - 1} (about "
            f"1e{int((span - 1) * 0.30103)}), more than float64's 53 bits combine: bring each context's tokens "
            "towards one size")


def _column_scales(E) -> str:
    """Where the token coordinates' sizes span more than float64's precision can combine, say so:
    then a context can be of full rank in exact arithmetic and not in float64."""
    top = np.abs(E).max(axis=(0, 1))
    exponents = np.frexp(top[top > 0])[1]           # (exponents, not a ratio: that can overflow)
    if exponents.size < 2 or exponents.max() - exponents.min() <= 53:
        return ""
    # (A factor, not the sizes: far from unit scale the data here are the rescaled ones.)
    span = int(exponents.max() - exponents.min())
    return (f"; E's columns differ in size by a factor of at least 2^{span - 1} (about 1e{int((span - 1) * 0.30103)}), "
            "more than float64's 53 bits combine: rescale the columns towards one size")
