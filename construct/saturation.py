"""Lemma 4 (saturation), the explicit scale ``c_h`` of docs/math.md §4.4.5, and the three scale rules.

Lemma 4: if ``g = E W' x`` has a unique maximum at ``j*`` with gap ``δ > 0``, then with
``ℓ = E W x``, ``‖softmax(ℓ + c g) − e_{j*}‖_1 ≤ 2 (n − 1) exp(2‖ℓ‖_∞ − c δ)``.

The scale keeps the rank (Lemma 5, Weyl) when
``‖C‖_2 · sqrt(|A|) · ρ · 2(n−1) · max_t exp(2‖ℓ^(t)‖_∞ − c δ_t) < σ_min(M)``.
Everything is computed in logarithms so that no exponential overflows.

The explicit scale is what the existence argument asks for; :func:`smallest_scale` finds, by
measuring instead of bounding, how little is actually needed.
"""

from __future__ import annotations

import numpy as np

from .arith import FLOAT64, Arithmetic
from .model import softmax

# How a head's saturation scale is chosen (build's ``scale=``), see :func:`choose_scale`.
SCALES = ("rank", "saturating", "explicit")

# The perturbation is kept below this fraction of σ_min(M): Lemma 5 needs strict inequality,
# and the margin absorbs the rounding of the finite-precision forward pass.
MARGIN = 0.5


def saturation_bound(ell_inf, delta, c: float, n: int):
    """Lemma 4's bound ``2 (n − 1) exp(2‖ℓ‖_∞ − c δ)`` on the L1 distance to the one-hot."""
    if n == 1:
        return np.zeros_like(np.asarray(ell_inf, dtype=float))
    with np.errstate(over="ignore"):                 # inf: the bound says nothing (distance ≤ 2)
        return 2.0 * (n - 1) * np.exp(2.0 * np.asarray(ell_inf) - c * np.asarray(delta))


def _log_prefactor(C_norm: float, count: int, rho: float, n: int) -> float:
    """``log(‖C‖_2 · sqrt(|A|) · ρ · 2(n − 1))``; ``-inf`` when a factor is zero."""
    with np.errstate(divide="ignore"):
        return float(np.log(C_norm) + 0.5 * np.log(count) + np.log(rho) + np.log(2.0 * (n - 1)))


def rank_perturbation_bound(C_norm: float, rho: float, ell_inf: np.ndarray, delta: np.ndarray,
                            c: float, n: int) -> float:
    """Upper bound on ``‖C (Z''_A − Z̄_A)‖_2`` at scale ``c``: the left side of the condition above.

    Each distance to a one-hot is also at most 2, so Lemma 4's factor ``(n − 1) exp(…)`` is capped
    at 1: the bound stays finite (``2 ‖C‖_2 sqrt(|A|) ρ``) at small scales.
    """
    if ell_inf.size == 0 or n == 1:
        return 0.0
    log_terms = np.minimum(2.0 * ell_inf - c * delta + np.log(n - 1), 0.0) - np.log(n - 1)
    return float(np.exp(_log_prefactor(C_norm, ell_inf.size, rho, n) + np.max(log_terms)))


def explicit_scale(C_norm: float, rho: float, ell_inf: np.ndarray, delta: np.ndarray, n: int,
                   sigma_min_M: float, margin: float = MARGIN) -> float:
    """Smallest ``c ≥ 0`` satisfying docs/math.md §4.4.5's condition with Lemma 4's bound as stated
    (uncapped), so that :func:`rank_perturbation_bound` is at most ``margin · σ_min(M)``.

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


# Bisection on log c stops when the admissible and the inadmissible scale are this close.
_SCALE_RESOLUTION = 1.1
# and never looks below c_explicit · 2^-_SCALE_OCTAVES.
_SCALE_OCTAVES = 60


def _one_hot_mask(ar: Arithmetic, shape: tuple[int, int], j: np.ndarray):
    mask = np.zeros(shape, dtype=bool)
    mask[np.arange(shape[0]), j] = True
    return ar.constant(mask)


def one_hot_distance(logits, j: np.ndarray, ar: Arithmetic = FLOAT64):
    """``‖softmax(v) − e_j‖_1`` for each row ``v`` of ``logits`` (T, n) and index ``j`` (T,).

    Computed as ``2 Σ_{i ≠ j} s_i`` from shifted logits, so it keeps its relative accuracy even
    far below ``ε`` (``1 − s_j`` would cancel).
    """
    xp = ar.xp
    w = ar.exp(logits - xp.max(logits, axis=1, keepdims=True))
    at_j = _one_hot_mask(ar, w.shape, j)
    rest = xp.sum(xp.where(at_j, 0.0, w), axis=1)
    return 2.0 * rest / (rest + xp.sum(xp.where(at_j, w, 0.0), axis=1))


def perturbation_at(C, C_norm: float, E_A, rho, ell, g, j_star: np.ndarray, c: float,
                    ar: Arithmetic = FLOAT64) -> float:
    """Upper bound on ``‖C (Z''_A − Z̄_A)‖_2`` at scale ``c``, measured on the actual attention.

    Row ``t`` of ``Z''_A − Z̄_A`` is ``E^(t)T (s^(t) − e_{j*})`` with ``s^(t) = softmax(ℓ^(t) + c g^(t))``,
    of norm at most ``ρ_t ‖s^(t) − e_{j*}‖_1``. The examples still far from their one-hot (all
    but a ``1e-6`` share of the largest such norm) are formed exactly; the rest enter through
    ``‖C‖_2 ‖(ρ_t ‖s^(t) − e_{j*}‖_1)_t‖_2`` (triangle inequality). Cheap once most examples
    saturate, which is the regime the scale search explores. Float64 arrays of ``ar``.
    """
    if ell.size == 0:
        return 0.0
    xp = ar.xp
    logits = ell + c * g
    far = rho * one_hot_distance(logits, j_star, ar)
    keep = far > 1e-6 * xp.max(far)
    rest = float(C_norm * ar.scalar(ar.vector_norm(far[~keep])))
    if not bool(xp.any(keep)):
        return rest
    kept = np.flatnonzero(ar.to_host(keep) > 0)
    at = ar.constant(kept)
    s = softmax(xp.take(logits, at, axis=0), ar) - ar.asarray(_one_hot_mask(FLOAT64, (kept.size, ell.shape[1]),
                                                                            j_star[kept]))
    G = xp.take(C, at, axis=1) @ ar.token_mix(xp.take(E_A, at, axis=0), s)
    return ar.spectral_norm(G) + rest


def choose_scale(rule: str, ar: Arithmetic, *, C, C_norm: float, E_A, rho, ell, g, j_star: np.ndarray, N0,
                 c_explicit: float, sigma_M: float, guess: float | None) -> float:
    """The saturation scale of a later head by ``rule`` (one of :data:`SCALES`).

    - ``explicit``: ``c_explicit``, docs/math.md §4.4.5's sufficient scale (Lemma 4 + Weyl).
    - ``saturating``: the smallest scale at which the measured perturbation
      (:func:`perturbation_at`) stays below ``MARGIN · σ_min(M)``: the proof's argument, on the
      actual attention instead of Lemma 4's bound.
    - ``rank``: the smallest scale at which the reduced new rows ``N = Z''_S − C Z''_A`` keep
      ``σ_min(N) ≥ (1 − MARGIN) σ_min(M)``: only what the rank step needs (Lemma 1 on ``N``).

    Arrays are float64 in ``ar``: ``C`` (m, |A|) the row reduction, ``E_A`` the earlier contexts,
    ``rho`` their largest token norms, ``ell`` and ``g`` their logits under ``W_S`` and ``W'``,
    ``j_star`` (host) where each saturates, ``N0`` the targets' rows ``Z''_S`` (m, d).
    """
    if rule == "explicit":
        return c_explicit
    if rule == "saturating":
        def perturbation(c_try: float) -> float:
            return perturbation_at(C, C_norm, E_A, rho, ell, g, j_star, c_try, ar)
        return smallest_scale(perturbation, c_explicit, MARGIN * sigma_M, guess)

    def shortfall(c_try: float) -> float:
        def part(lo: int, hi: int):                            # C Z''_A over rows lo..hi−1
            return C[:, lo:hi] @ ar.token_mix(E_A[lo:hi, ...], softmax(ell[lo:hi, ...] + c_try * g[lo:hi, ...], ar))
        parts = ar.rows(part, ell.shape[0])
        total = parts[0]
        for more in parts[1:]:
            total = total + more
        return -ar.smallest_singular_value(N0 - total)
    return smallest_scale(shortfall, c_explicit, -(1 - MARGIN) * sigma_M, guess)


def smallest_scale(measure, c_explicit: float, target: float, guess: float | None = None) -> float:
    """Smallest ``c ∈ [c_explicit·2^-60, c_explicit]`` (to a factor 1.1) with ``measure(c) ≤ target``.

    ``measure(c)`` bounds the perturbation ``‖C (Z̄_A − Z''_A(c))‖_2`` at scale ``c``
    (:func:`perturbation_at`); ``target`` is ``margin · σ_min(M)``. Each earlier example's
    attention moves towards its one-hot as ``c`` grows, so the measure decreases and a bracket on
    ``log c`` can be narrowed; the returned scale always satisfies ``measure(c) ≤ target`` itself, and
    ``c / 1.1`` did not (unless the lower end was reached). Returns ``c_explicit`` when even it
    does not measure below the target.

    ``guess`` (the previous head's scale, say) only changes where the search starts: it steps
    from the guess until the crossing is bracketed. The bracket is then narrowed at points that
    interpolation of the measure in ``log c`` suggests (:func:`_next_probe`), each followed by a
    probe 10% lower that can close it. Within an octave of the answer that takes about 5
    measurements instead of 11 from the whole range.
    """
    if c_explicit <= 0:
        return c_explicit
    seen: dict[float, float] = {}

    def measured(c: float) -> float:
        seen[c] = measure(c)
        return seen[c]

    floor = c_explicit * 2.0 ** -_SCALE_OCTAVES
    if guess is not None and floor < guess < c_explicit:
        lo, hi = _bracket(measured, guess, floor, c_explicit, target)
        if lo is None:                       # the bracket reached an end of the range
            return hi
    else:
        if measured(c_explicit) > target:
            return c_explicit
        if measured(floor) <= target:
            return floor
        lo, hi = floor, c_explicit
    closing = False
    while hi > lo * _SCALE_RESOLUTION:
        mid = hi / _SCALE_RESOLUTION if closing else _next_probe(lo, hi, seen[lo], seen[hi], target)
        if measured(mid) <= target:         # after a pass above the crossing, try 10% below it
            closing = not closing and mid / _SCALE_RESOLUTION > lo
            hi = mid
        else:
            lo, closing = mid, False
    return hi


def _next_probe(lo: float, hi: float, f_lo: float, f_hi: float, target: float) -> float:
    """Where to measure next in ``(lo, hi)``: a little above the crossing that linear interpolation
    of the measure in ``log c`` predicts (so that the probe 10% below it can close the bracket),
    kept a tenth of the interval away from either end; the geometric mean when the two values do
    not interpolate."""
    u_lo, u_hi = np.log(lo), np.log(hi)
    if not (np.isfinite(f_lo) and np.isfinite(f_hi) and f_lo > target >= f_hi):
        return float(np.sqrt(lo * hi))
    u = u_lo + (f_lo - target) / (f_lo - f_hi) * (u_hi - u_lo) + 0.5 * np.log(_SCALE_RESOLUTION)
    margin = 0.1 * (u_hi - u_lo)
    return float(np.exp(min(max(u, u_lo + margin), u_hi - margin)))


def _bracket(measure, guess: float, floor: float, top: float, target: float):
    """``(lo, hi)`` with ``measure(lo) > target ≥ measure(hi)``, stepping from ``guess`` within
    ``[floor, top]`` by 1, 2, 4, … octaves (galloping: close answers cost few steps, far ones
    about as many as bisecting the whole range); ``(None, c)`` when the answer is an end ``c``."""
    octaves = 1.0
    if measure(guess) <= target:
        hi = guess
        while True:
            c = max(hi * 2.0 ** -octaves, floor)
            if measure(c) > target:
                return c, hi
            if c == floor:
                return None, floor
            hi, octaves = c, 2 * octaves
    lo = guess
    while True:
        c = min(lo * 2.0 ** octaves, top)
        if measure(c) <= target:
            return lo, c
        if c == top:
            return None, top
        lo, octaves = c, 2 * octaves
