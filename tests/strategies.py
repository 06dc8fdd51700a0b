"""Hypothesis strategies: datasets that satisfy the paper's assumptions, and datasets that break them.

Every array is drawn from a seeded generator; hypothesis shrinks the seed and the sizes. Sizes stay
small (H ≤ 3, n ≤ 4, d ≤ n + 3) so that the CI profile's 200 examples per test run in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from construct import Dataset, Weights, as_dataset, capacity, synthetic

seeds = st.integers(0, 2**32 - 1)

KINDS = ("independent", "shared", "general-position", "near-degenerate")

# Near-degenerate data: a context's last token and a query within this distance of degenerate.
NEAR = 1e-3


@dataclass(frozen=True)
class Problem:
    """A dataset with a model shape for it: ``H`` heads, key/query dimension ``d_h``."""

    data: Dataset
    H: int
    d_h: int
    kind: str


def dataset(kind: str, T: int, n: int, d: int, seed: int, d_o: int = 1) -> Dataset:
    """A dataset of one of :data:`KINDS` (valid under A1, A2 almost surely).

    ``near-degenerate``: Gaussian data whose contexts each hold two tokens ``NEAR`` apart, and
    whose queries come in pairs ``NEAR`` apart (still A1 and A2, with small gaps δ).
    """
    if kind != "near-degenerate":
        return synthetic(kind, T=T, n=n, d=d, d_o=d_o, seed=seed)
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((T, n, d))
    if n >= 2:
        E[:, -1] = E[:, 0] + NEAR * rng.standard_normal((T, d))
    X = rng.standard_normal((T, d))
    X[1::2] = X[0:-1:2][: X[1::2].shape[0]] + NEAR * rng.standard_normal(X[1::2].shape)
    return as_dataset(E, X, rng.random((T, d_o)))


@st.composite
def problems(draw, kinds=KINDS, max_heads: int = 3, extra_examples: int = 0, d_o: int = 1,
             min_groups: int = 1) -> Problem:
    """A valid problem with ``T ≤ H(k−1)+1 + extra_examples`` (extra examples exceed the capacity).

    ``min_groups``: at least that many groups of examples, so that many heads have work (for the
    checks of later heads, which a single group leaves with nothing to check).
    """
    kind = draw(st.sampled_from(kinds))
    n = draw(st.integers(2, 4))
    d = n + draw(st.integers(0, 3)) if kind != "near-degenerate" else n + draw(st.integers(1, 3))
    H = draw(st.integers(min_groups, max(min_groups, max_heads)))
    d_h = draw(st.sampled_from([n - 1, n, n + 2])) if n > 2 else draw(st.sampled_from([n, n + 2]))
    cap = capacity(H, n, d_h)                                   # k = min(n, d_h) ≥ 2 here
    T = draw(st.integers(capacity(min_groups - 1, n, d_h) + 1 if min_groups > 1 else 1, cap + extra_examples))
    return Problem(dataset(kind, T, n, d, draw(seeds), d_o=min(d_o, d)), H, d_h, kind)


VIOLATIONS = {
    "A2": "contexts have full row rank (A2)",
    "n > d": "n ≤ d",
    "partition": "queries satisfy the partition condition (implied by A1)",
}


@st.composite
def violations(draw) -> tuple[Problem, str]:
    """A problem that breaks one hypothesis, with the name the checks give that hypothesis.

    - A2: one context repeats a token (rank E^(t) < n);
    - n > d: more tokens than dimensions;
    - partition: a query duplicated inside the first group.
    """
    which = draw(st.sampled_from(sorted(VIOLATIONS)))
    seed = draw(seeds)
    rng = np.random.default_rng(seed)
    H, n = draw(st.integers(1, 3)), draw(st.integers(2, 4))
    d = n + draw(st.integers(0, 2))
    T = draw(st.integers(2, capacity(H, n, n)))
    if which == "n > d":
        d = n - 1
    E, X, Y = rng.random((T, n, d)), rng.random((T, d)), rng.random(T)
    if which == "A2":
        t = draw(st.integers(0, T - 1))
        E[t, -1] = E[t, 0]
    elif which == "partition":
        X[1] = X[0]
    return Problem(as_dataset(E, X, Y), H, n, which), VIOLATIONS[which]


@st.composite
def arbitrary_weights(draw, H: int, d: int, d_h: int, rng: np.random.Generator):
    """Weights with per-head scales from 1e-3 to 1e3 (large scales saturate the head)."""
    scales = [10.0 ** draw(st.floats(-3, 3)) for _ in range(H)]
    W_K = np.stack([s * rng.standard_normal((d, d_h)) for s in scales])
    W_Q = rng.standard_normal((H, d, d_h))
    return Weights(W_K=W_K, W_Q=W_Q, W_V=rng.standard_normal((H, d, 1)), W_O=rng.standard_normal((H, d)),
                   W_D=rng.standard_normal((d, 1)), skip=False)


def near_degenerate_family(gap: float, seed: int = 0, H: int = 3, n: int = 3, d: int = 4) -> Dataset:
    """The shipped near-degenerate family (issue #4): Lemma 3's smallest gap δ is about ``gap``.

    Example 0 (group 1) shares its context with example ``n`` (group 2) and its query lies
    ``gap`` away from that example's: head 2's separator meets example 0 at ``b·x ≈ gap``, and
    the row reduction ties the two examples together (``C`` has an entry near 1), so head 2
    must saturate example 0 through a tiny gap: ``c_2 ≈ 1/gap``.
    """
    rng = np.random.default_rng(seed)
    T = H * (n - 1) + 1
    E, X, Y = rng.random((T, n, d)), rng.random((T, d)), rng.random(T)
    E[0] = E[n]
    X[0] = X[n] + gap * _off_span(X[n:2 * n - 1], rng)
    return as_dataset(E, X, Y)


def _off_span(V: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random unit vector orthogonal to the rows of ``V``: a step of any size leaves their span."""
    Q, _ = np.linalg.qr(V.T, mode="complete")
    u = Q[:, V.shape[0]:] @ rng.standard_normal(V.shape[1] - V.shape[0])
    return u / np.linalg.norm(u)


@st.composite
def adversarial(draw) -> tuple[Dataset, int]:
    """Adversarial but valid problems: (data, H).

    - ``span``: a query 1e-13..1e-10 away from a later group's span (tiny Lemma 3 gap);
    - ``tokens``: a context with two tokens 1e-9 apart (its logits nearly tie);
    - ``family``: :func:`near_degenerate_family` with a gap from 1e-13 to 1e-9.
    """
    kind = draw(st.sampled_from(["span", "tokens", "family"]))
    seed = draw(seeds)
    if kind == "family":
        return near_degenerate_family(10.0 ** draw(st.floats(-13, -9)), seed), 3
    rng = np.random.default_rng(seed)
    H, n, d = 3, 3, 4
    T = H * (n - 1) + 1
    E, X, Y = rng.random((T, n, d)), rng.random((T, d)), rng.random(T)
    if kind == "span":                      # group 2 is examples n..2n−2
        X[0] = X[n] - X[n + 1] + 10.0 ** draw(st.floats(-13, -10)) * _off_span(X[n:2 * n - 1], rng)
    else:
        t = draw(st.integers(0, T - 1))
        E[t, 1] = E[t, 0] + 1e-9 * rng.standard_normal(d)
    return as_dataset(E, X, Y), H
