"""Lemma 4 (saturation) and the explicit scale ``c_h`` of MATH.md §4.4.5.

Lemma 4: if ``g = E W' x`` has a unique maximum at ``j*`` with gap ``δ > 0``, then with
``ℓ = E W x``, ``‖softmax(ℓ + c g) − e_{j*}‖_1 ≤ 2 (n − 1) exp(2‖ℓ‖_∞ − c δ)``.

The scale keeps the rank (Lemma 5, Weyl) when
``‖C‖_2 · sqrt(|A|) · ρ · 2(n−1) · max_t exp(2‖ℓ^(t)‖_∞ − c δ_t) < σ_min(M)``.
Everything is computed in logarithms so that no exponential overflows.
"""

from __future__ import annotations

import numpy as np

# The perturbation is kept below this fraction of σ_min(M): Lemma 5 needs strict inequality,
# and the margin absorbs the rounding of the finite-precision forward pass.
MARGIN = 0.5


def saturation_bound(ell_inf, delta, c: float, n: int):
    """Lemma 4's bound ``2 (n − 1) exp(2‖ℓ‖_∞ − c δ)`` on the L1 distance to the one-hot."""
    if n == 1:
        return np.zeros_like(np.asarray(ell_inf, dtype=float))
    return 2.0 * (n - 1) * np.exp(2.0 * np.asarray(ell_inf) - c * np.asarray(delta))


def _log_prefactor(C_norm: float, count: int, rho: float, n: int) -> float:
    """``log(‖C‖_2 · sqrt(|A|) · ρ · 2(n − 1))``; ``-inf`` when a factor is zero."""
    with np.errstate(divide="ignore"):
        return float(np.log(C_norm) + 0.5 * np.log(count) + np.log(rho) + np.log(2.0 * (n - 1)))


def rank_perturbation_bound(C_norm: float, rho: float, ell_inf: np.ndarray, delta: np.ndarray,
                            c: float, n: int) -> float:
    """Upper bound on ``‖C (Z''_A − Z̄_A)‖_2`` at scale ``c``: the left side of the condition above."""
    if ell_inf.size == 0 or n == 1:
        return 0.0
    log_terms = _log_prefactor(C_norm, ell_inf.size, rho, n) + 2.0 * ell_inf - c * delta
    return float(np.exp(np.max(log_terms)))


def explicit_scale(C_norm: float, rho: float, ell_inf: np.ndarray, delta: np.ndarray, n: int,
                   sigma_min_M: float, margin: float = MARGIN) -> float:
    """Smallest ``c ≥ 0`` for which :func:`rank_perturbation_bound` is at most ``margin · σ_min(M)``.

    Args:
        C_norm: ``‖C‖_2`` of the row reduction.
        rho: largest token norm over the earlier examples.
        ell_inf: ``‖ℓ^(t)‖_∞`` per earlier example, shape (|A|,).
        delta: Lemma 3's gaps ``δ_t > 0``, shape (|A|,).
        n: context size.
        sigma_min_M: smallest singular value of ``M``, > 0.
    """
    if ell_inf.size == 0 or n == 1:
        return 0.0
    budget = np.log(margin * sigma_min_M) - _log_prefactor(C_norm, ell_inf.size, rho, n)
    needed = (2.0 * ell_inf - budget) / delta
    return float(max(0.0, np.max(needed)))
