"""Lemma 4 (saturation): ``‖softmax(E (W + c W') x) − e_{j*}‖_1 ≤ 2 (n − 1) exp(2‖ℓ‖_∞ − c δ)``.

``g = E W' x`` has its unique maximum at ``j*`` with gap ``δ``, ``ℓ = E W x``. The bound itself is
:func:`construct.saturation.saturation_bound`, the one the engine uses to choose ``c_h``.

The distance is :func:`construct.saturation.one_hot_distance`, computed without cancellation.
"""

from __future__ import annotations

import numpy as np

from construct.arith import EPS
from construct.saturation import one_hot_distance, saturation_bound
from construct.separator import top_gap

from .check import Check, arrays, one_blas_thread, real

STATEMENT = "Lemma 4"


@one_blas_thread
def check(E: np.ndarray, X: np.ndarray, W: np.ndarray, W_prime: np.ndarray, c: float) -> Check:
    """Lemma 4 on every example of ``E`` (T, n, d), ``X`` (T, d) for ``W``, ``W'`` (d, d) and ``c``.

    The computed distance and bound carry rounding: a relative ``4nε`` from the sums, and the
    exponentials' arguments (of size up to ``v = 2‖ℓ‖_∞ + c‖g‖_∞``) are off by about ``vε``,
    which scales the ratio by up to ``exp(4vε)``. The conclusion allows that and nothing more.
    An example whose maximum of ``g`` is unique only beyond ``g``'s own rounding (an exact tie
    may hide there) is undecided, as is one whose allowance overflows.

    Returns:
        A :class:`Check` with, per example, ``distance``, ``bound``, ``j_star`` and ``delta``.
    """
    E, X, W, W_prime = arrays(E=(E, "T n d"), X=(X, "T d"), W=(W, "d d"), W_prime=(W_prime, "d d"))
    c = real(c, "c")
    n = E.shape[1]
    ell = np.einsum("tnd,td->tn", E, X @ np.asarray(W, dtype=float).T)
    v = X @ np.asarray(W_prime, dtype=float).T
    g = np.einsum("tnd,td->tn", E, v)
    j_star, delta = top_gap(g)
    certain = _unique_beyond_rounding(E, X, W_prime, v, g, j_star)
    hyp = {"c > 0": c > 0, "g has a unique maximum (δ > 0) on every example": bool(np.all(delta > 0))}
    if not np.isfinite(c):                           # nothing to evaluate at an infinite or NaN scale
        hyp["c finite"] = False
        return Check(STATEMENT, hyp, None, {})
    distance = one_hot_distance(ell + c * g, j_star)
    bound = saturation_bound(np.abs(ell).max(axis=1), delta, c, n)
    size = 2 * np.abs(ell).max(axis=1) + c * np.abs(g).max(axis=1)
    with np.errstate(over="ignore"):
        slack = np.exp(4 * size * EPS)
    # Where the rounding allowance overflows, the computed logits may be off by more than any
    # gap: float64 cannot decide that example (the bound may have underflowed to 0 as well).
    # Nor where g's rounding could hide a tie: the exact g may have no unique maximum at all.
    seen = np.isfinite(slack) & certain
    with np.errstate(over="ignore", invalid="ignore"):
        allowed = np.where(seen & (bound > 0), bound * (1 + 4 * n * EPS) * np.where(seen, slack, 1.0), 0.0)
    if np.any(seen & ~(distance <= allowed)):
        holds = False
    else:
        holds = True if np.all(seen) else None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, distance / bound, np.where(distance > 0, np.inf, 0.0))
    q = {"max_ratio": float(ratio.max()) if ratio.size else 0.0, "undecided_examples": int(np.sum(~seen)),
         "distance": distance, "bound": bound, "j_star": j_star, "delta": delta, "ell": ell}
    return Check(STATEMENT, hyp, holds, q)


def _unique_beyond_rounding(E, X, W_prime, v, g, j_star) -> np.ndarray:
    """Per example, whether the exact ``g = E (W' x)`` has its unique maximum at the computed
    ``j*``: each product of ``d`` terms is within ``d ε`` times its sum of absolute terms, so
    with ``v̂`` the computed ``W' x``, ``|ĝ − g| ≤ |E| (d ε |v̂| + d ε |W'| |x|)``; the maximum is
    certain where ``ĝ_{j*}`` exceeds every other entry by more than both their bounds
    (``e_1·a = 1 + 1e16 − 1e16`` rounds to 0 beside ``e_2·a = 1``: a tie that float64 sees as a
    gap of 1)."""
    T, n, d = E.shape
    if n == 1 or not T:
        return np.ones(T, dtype=bool)
    rows = np.arange(T)
    with np.errstate(over="ignore", invalid="ignore"):       # overflowed products: not certain
        err_v = d * EPS * (np.abs(X) @ np.abs(np.asarray(W_prime, dtype=float)).T)
        err = np.einsum("tnd,td->tn", np.abs(E), d * EPS * np.abs(v) + err_v)
        room = g[rows, j_star][:, None] - g - (err[rows, j_star][:, None] + err)
    room[rows, j_star] = np.inf
    return np.all(room > 0, axis=1)


def extremal(n: int, d: int, L: float, delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An example on which Lemma 4's bound is attained as ``c δ − 2L → ∞``.

    ``ℓ = −L`` on the winning token and ``+L`` on the others, ``g = δ`` on the winner and 0
    elsewhere. Then ``distance / bound = 1 / (1 + (n − 1) exp(2L − c δ))``: the constant
    ``2(n − 1)`` and the exponent ``2‖ℓ‖_∞`` cannot be improved.

    Returns:
        ``E`` (1, n, d), ``X`` (1, d), ``W``, ``W'`` (d, d) for :func:`check`.
    """
    if not 1 <= n <= d:
        raise ValueError(f"need 1 ≤ n ≤ d, got n = {n}, d = {d}")
    E = np.eye(n, d)[None]
    X = np.eye(1, d)
    ell = np.full(d, L)
    ell[0] = -L
    g = np.zeros(d)
    g[0] = delta
    return E, X, np.outer(ell, X[0]), np.outer(g, X[0])
