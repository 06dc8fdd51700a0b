"""Lemma 3: the rank-one separator ``W' = a b^T``.

``b`` is a random unit vector orthogonal to ``span X_S``, so ``W' x^(t) = 0`` on ``S``; for every
other example ``b·x^(t) ≠ 0`` (the partition guarantees ``x^(t) ∉ span X_S``), and ``a`` Gaussian
makes the entries of ``g^(t) = E^(t) a (b·x^(t))`` pairwise distinct almost surely. The largest
entry ``j*(t)`` is where the head saturates as its scale grows (Lemma 4), with gap ``δ_t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arith import FLOAT64, Arithmetic


@dataclass(frozen=True)
class Separator:
    """A rank-one separator and what it does to the examples it does not fit.

    Attributes:
        a, b: the factors, shape (d,) each; ``W' = a b^T``.
        g: the separator's logits ``E^(t) a (b·x^(t))`` on the other examples, shape (|A|, n).
        j_star: index of each example's largest entry of ``g``, shape (|A|,) (host integers).
        delta: gap between the largest and second largest entry, shape (|A|,).
    """

    a: object
    b: object
    g: object
    j_star: np.ndarray
    delta: object


def orthogonal_direction(X_S, rng: np.random.Generator, ar: Arithmetic = FLOAT64):
    """A random unit vector orthogonal to the rows of ``X_S`` (m, d), ``m < d``, in ``ar``.

    The direction is drawn in float64 (:attr:`Arithmetic.low`); in a more precise arithmetic it is
    projected once more there, so that ``X_S b`` vanishes to its rounding instead of float64's.
    """
    m, d = X_S.shape
    basis = ar.low.complement(ar.lowered(X_S).T)
    b = basis @ ar.low.asarray(rng.standard_normal(d - m))
    if ar.low is not ar:
        b = ar.asarray(ar.to_host(b))
        if m:
            b = b - X_S.T @ ar.gram_solve_rows(X_S, X_S @ b)
        return b / ar.sqrt(b @ b)
    return b / ar.low.vector_norm(b)


def separator_logits(E_A, X_A, a, b):
    """``g^(t) = E^(t) a b^T x^(t)`` for each example, shape (|A|, n)."""
    return (E_A @ a) * (X_A @ b)[:, None]


def top_gap(g, ar: Arithmetic = FLOAT64):
    """Argmax ``j*`` of each row of ``g`` (host integers) and the gap ``δ = g_(1) − g_(2)``
    (``inf`` if ``n = 1``)."""
    j_star = ar.indices(ar.xp.argmax(g, axis=1))
    if g.shape[1] == 1:
        return j_star, np.full(g.shape[0], np.inf)
    top2 = ar.xp.sort(g, axis=1)[:, -2:]
    return j_star, top2[:, 1] - top2[:, 0]


def rank_one_separator(X_S, E_A, X_A, rng: np.random.Generator, ar: Arithmetic = FLOAT64) -> Separator:
    """Lemma 3 for fitted queries ``X_S`` (m, d) and other examples ``E_A`` (|A|, n, d), ``X_A`` (|A|, d)."""
    b = orthogonal_direction(X_S, rng, ar)
    a = ar.asarray(rng.standard_normal(X_S.shape[1]))
    g = separator_logits(E_A, X_A, a, b)
    j_star, delta = top_gap(g, ar)
    return Separator(a=a, b=b, g=g, j_star=j_star, delta=delta)
