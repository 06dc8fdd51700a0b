"""Lemma 3: the rank-one separator ``W' = a b^T``.

``b`` is a random unit vector orthogonal to ``span X_S``, so ``W' x^(t) = 0`` on ``S``; for every
other example ``b·x^(t) ≠ 0`` (the partition guarantees ``x^(t) ∉ span X_S``), and ``a`` Gaussian
makes the entries of ``g^(t) = E^(t) a (b·x^(t))`` pairwise distinct almost surely. The largest
entry ``j*(t)`` is where the head saturates as its scale grows (Lemma 4), with gap ``δ_t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath
import numpy as np

from . import precision


@dataclass(frozen=True)
class Separator:
    """A rank-one separator and what it does to the examples it does not fit.

    Attributes:
        a, b: the factors, shape (d,) each; ``W' = a b^T``.
        g: the separator's logits ``E^(t) a (b·x^(t))`` on the other examples, shape (|A|, n).
        j_star: index of each example's largest entry of ``g``, shape (|A|,).
        delta: gap between the largest and second largest entry, shape (|A|,).
    """

    a: np.ndarray
    b: np.ndarray
    g: np.ndarray
    j_star: np.ndarray
    delta: np.ndarray


def orthogonal_direction(X_S: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random unit vector orthogonal to the rows of ``X_S`` (m, d), ``m < d``, at ``X_S``'s precision.

    At high precision the float64 direction is projected once more, at that precision, so that
    ``X_S b`` vanishes to its rounding instead of float64's.
    """
    m, d = X_S.shape
    Q, _ = np.linalg.qr(precision.to_float(X_S).T, mode="complete")
    b = Q[:, m:] @ rng.standard_normal(d - m)
    if precision.is_mp(X_S):
        b = precision.of(X_S).asarray(b)
        if m:
            b = b - X_S.T @ precision.gram_solve_rows(X_S, X_S @ b)
        return b / mpmath.sqrt(b @ b)
    return b / np.linalg.norm(b)


def separator_logits(E_A: np.ndarray, X_A: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``g^(t) = E^(t) a b^T x^(t)`` for each example, shape (|A|, n)."""
    return (E_A @ a) * (X_A @ b)[:, None]


def top_gap(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Argmax ``j*`` of each row of ``g`` and the gap ``δ = g_(1) − g_(2)`` (``inf`` if ``n = 1``)."""
    j_star = np.argmax(g, axis=1)
    if g.shape[1] == 1:
        return j_star, np.full(g.shape[0], np.inf)
    top2 = np.sort(g, axis=1)[:, -2:] if precision.is_mp(g) else -np.partition(-g, 1, axis=1)[:, 1::-1]
    return j_star, top2[:, 1] - top2[:, 0]


def rank_one_separator(X_S: np.ndarray, E_A: np.ndarray, X_A: np.ndarray,
                       rng: np.random.Generator) -> Separator:
    """Lemma 3 for fitted queries ``X_S`` (m, d) and other examples ``E_A`` (|A|, n, d), ``X_A`` (|A|, d)."""
    b = orthogonal_direction(X_S, rng)
    a = precision.of(X_S).asarray(rng.standard_normal(X_S.shape[1]))
    g = separator_logits(E_A, X_A, a, b)
    j_star, delta = top_gap(g)
    return Separator(a=a, b=b, g=g, j_star=j_star, delta=delta)
