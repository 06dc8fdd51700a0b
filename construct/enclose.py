"""Rigorous enclosures in float64, for certifying float64 weights at full size.

Everything here returns a midpoint array and a radius array (``|exact − mid| ≤ rad``
elementwise) using only IEEE-754 double arithmetic in round-to-nearest and the classical error
bounds (Higham, *Accuracy and Stability of Numerical Algorithms*, §3): a dot product of length
``k`` is within ``γ_k |x|^T |y|`` of the exact one, ``γ_k = k u / (1 − k u)``, ``u = 2^-53``, in
any summation order and with or without fused multiply-adds; BLAS products obey the same bound.
Bounds are computed from nonnegative arrays, whose own rounding is relative and is covered by
inflating them with :func:`up`. Underflow adds at most ``2^-1074`` per operation and is covered
by an absolute term.

``exp`` is not taken from the C library (whose accuracy is not specified): :func:`exp_enclosure`
and :func:`exp_around` evaluate it by Cody–Waite range reduction and a degree-14 Taylor
polynomial with explicit bounds on the reduction, truncation and rounding errors.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

import numpy as np

U = 2.0 ** -53
TINY = 2.0 ** -1074                      # the smallest subnormal: one underflow step

# ln 2 = LN2_HI + LN2_LO + ζ, |ζ| ≤ 1.2e-26 (LN2_HI has 33 significant bits, so k·LN2_HI is exact
# for |k| < 2^20).
LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_LN2_GAP = 1.2e-26
_INV_LN2 = 1.4426950408889634
_TAYLOR = [1.0 / math.factorial(i) for i in range(15)]      # degree 14
# |r| ≤ ln2/2 + slack: the truncation error of the degree-14 Taylor polynomial, relative to e^r,
# is below |r|^15/15! · e^{2|r|} < 3e-19; Horner's rounding (28 operations, coefficients rounded)
# is below 30u·e^{2|r|} < 60u relative. Together, with room: 64u.
_EXP_REL = 64 * U + 3e-19


def ieee_subnormals() -> bool:
    """Whether float64 on this thread keeps subnormal numbers, as every bound here assumes: a
    library built with ``-ffast-math`` that is loaded into the process can switch the processor to
    flushing them to zero (FTZ) or reading them as zero (DAZ)."""
    a = np.array([TINY, 2.0 ** -1022])
    return bool((a[0] + a[:1] * 0.0)[0] != 0.0 and (a[1:] * 0.5)[0] != 0.0)


def round3(x, up: bool):
    """``x`` rounded outwards (up or down) to 3 significant digits: the bound a certificate, or
    a report, states.

    Bounds that differ only in their last bits (another BLAS, another summation order) then state
    the same number. The float nearest the rounded decimal is still on the safe side of ``x``:
    ``x`` itself is a float between them. ``None``, integers, 0 and non-finite values as given.
    """
    if x is None or isinstance(x, int) or x == 0 or not math.isfinite(x):
        return x
    exact = Decimal(x)
    step = Decimal(1).scaleb(exact.adjusted() - 2)
    rounded = float(exact.quantize(step, rounding=ROUND_CEILING if up else ROUND_FLOOR))
    return rounded if math.isfinite(rounded) else x          # next to float's largest: as it is


def gamma(k: int) -> float:
    """``γ_k = k u / (1 − k u)``."""
    return k * U / (1 - k * U)


def up(bound: np.ndarray, k: int) -> np.ndarray:
    """A nonnegative bound computed with ``k``-term sums, inflated past its own rounding."""
    return bound * (1 + 2 * gamma(k + 2)) + k * TINY


def exp_enclosure(lo_x: np.ndarray, hi_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``lo ≤ exp(x) ≤ hi`` for every exact ``x ∈ [lo_x, hi_x]`` (elementwise; beyond
    700 the upper end is ``inf`` and the lower end that of 700)."""
    return _exp_bound(lo_x, -1), _exp_bound(hi_x, +1)


def exp_around(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``lo ≤ exp(y) ≤ hi`` for every exact ``y`` within ``w ≥ 0`` of ``x`` (elementwise).

    One evaluation of the polynomial where ``w ≤ 1/16`` and ``x ± w`` lies in ``[−740, 700]``:
    ``exp(x)``'s two bounds, taken past ``e^w ≤ 1 + w + w²`` and ``e^{−w} ≥ 1 − w`` (both hold for
    ``0 ≤ w ≤ 1``). Beyond the roundings :func:`_exp_parts` counts, the factors and products
    round at most five times more (``8u``, ``4u``), each within ``TINY/2`` in the subnormal range
    (``4·TINY``). Elsewhere, :func:`exp_enclosure` on the ends ``x ± w``, each moved outwards by
    one step past its rounding.
    """
    x, w = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64))
    shape, x, w = x.shape, x.reshape(-1), w.reshape(-1)
    with np.errstate(invalid="ignore"):         # NaN and inf take the other path
        fast = (w <= 0.0625) & (x - w >= -740.0) & (x + w <= 700.0)
    lo, hi = np.empty_like(x), np.empty_like(x)
    if fast.all():                              # as good as always: no copies of x and w
        xf, wf = x, w
    else:
        xf, wf = x[fast], w[fast]
        slow = ~fast
        with np.errstate(invalid="ignore", over="ignore"):
            ends = (np.nextafter(x[slow] - w[slow], -np.inf), np.nextafter(x[slow] + w[slow], np.inf))
        lo[slow], hi[slow] = exp_enclosure(*ends)
    p, k, rel = _exp_parts(xf)
    k = k.astype(np.int64)
    grow = 1.0 + (wf + wf * wf)                 # ≥ e^w · (1 − 3u)
    shrink = 1.0 - wf                           # ≤ e^{−w} · (1 + u)
    up_x = np.ldexp(p * (1 + rel), k) * (1 + 2 * U)
    lo_x = np.ldexp(p * (1 - rel), k) * (1 - 2 * U)
    lo[fast] = np.maximum(lo_x * shrink * (1 - 4 * U) - 4 * TINY, 0.0)
    hi[fast] = up_x * grow * (1 + 8 * U) + 4 * TINY
    return lo.reshape(shape), hi.reshape(shape)


def _exp_parts(xc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, k, rel)`` with ``exp(x) = 2^k · p · (1 + δ)``, ``|δ| ≤ rel``, for float64 ``x`` in
    ``[−746, 700]``: Cody–Waite range reduction and the degree-14 Taylor polynomial. Forming
    ``2^k·p·(1 ± rel)`` rounds twice more, and once in the subnormal range (``TINY``)."""
    k = np.rint(xc * _INV_LN2)
    # x − k·LN2_HI is exact (Sterbenz when k ≠ 0); subtracting k·LN2_LO costs two roundings.
    r = (xc - k * LN2_HI) - k * LN2_LO
    r_err = 2 * U * (np.abs(r) + np.abs(k * LN2_LO)) + np.abs(k) * _LN2_GAP
    p = np.full_like(r, _TAYLOR[-1])
    for c in reversed(_TAYLOR[:-1]):            # Horner, in place: the same two roundings a step
        p *= r
        p += c
    rel = _EXP_REL + 2 * r_err + 8 * U           # e^{r_err} ≤ 1 + 2 r_err for tiny r_err; final products
    return p, k, rel


def _exp_bound(x: np.ndarray, side: int) -> np.ndarray:
    """A lower (``side = −1``) or upper (``+1``) bound on ``exp(x)`` for float64 ``x``: past 700
    the upper bound is ``inf`` (and NaN's too) and the lower one ``exp(700)``'s, so that the range
    reduction's integer ``k`` stays small (beyond about 6.4e18 it overflowed int64, and the upper
    bound came out as ``TINY``)."""
    x = np.asarray(x, dtype=np.float64)
    shape, x = x.shape, x.reshape(-1)           # 0-d too: the ends are set in place below
    # below −746, exp(x) < 2^-1075: the answer is [0, TINY]; above 700, [exp(700), inf]
    xc = np.clip(x, -746.0, 700.0)
    nan = np.isnan(xc)
    if nan.any():                               # a NaN's k would be no integer at all
        xc[nan] = 0.0
    p, k, rel = _exp_parts(xc)
    if side < 0:
        out = np.maximum(np.ldexp(p * (1 - rel), k.astype(np.int64)) * (1 - 2 * U) - TINY, 0.0)
        out[x < -746.0] = 0.0
        out[nan] = np.nan
        return out.reshape(shape)
    out = np.ldexp(p * (1 + rel), k.astype(np.int64)) * (1 + 2 * U) + TINY
    out[x < -746.0] = TINY
    out[~(x <= 700.0)] = np.inf                 # above 700, and NaN
    return out.reshape(shape)


def matmul(A: np.ndarray, A_rad: np.ndarray | None, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enclosure of ``A_exact @ B`` with ``|A_exact − A| ≤ A_rad`` and ``B`` exact: (mid, rad)."""
    k = A.shape[-1]
    mid = A @ B
    absB = np.abs(B)
    rad = gamma(k) * (np.abs(A) @ absB)
    if A_rad is not None:
        rad = rad + A_rad @ absB
    return mid, up(rad, k)


def features(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray,
             absE: np.ndarray | None = None, E_rad: np.ndarray | None = None,
             X_rad: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Enclosure of one head's exact features ``z^(t) = E^(t)T softmax(E^(t) W_K W_Q^T x^(t))``, (T, d) each.

    ``absE``: ``|E|``, when the caller has it (it is the same for every head). ``E_rad``,
    ``X_rad``: when the exact inputs are only enclosed (``|E_exact − E| ≤ E_rad``, the outputs of
    a pre-layer for instance), their radii; the features are then enclosed for every input within.
    """
    z, z_rad = head_features(E, X, W_K[None], W_Q[None], absE, E_rad, X_rad)
    return z[:, 0], z_rad[:, 0]


def head_features(E: np.ndarray, X: np.ndarray, W_K: np.ndarray, W_Q: np.ndarray,
                  absE: np.ndarray | None = None, E_rad: np.ndarray | None = None,
                  X_rad: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`features` of several heads at once, ``W_K`` and ``W_Q`` (heads, d, d_h): (T, heads, d) each.

    The same bounds, formed by products over the heads together: each context is read a few
    times per group of heads instead of six times per head (a block of contexts outgrows the
    cache, and reading it was most of the time). The bounds hold in any order of summation.
    """
    absE = np.abs(E) if absE is None else absE
    S, S_rad = _attention(E, X, W_K, W_Q, absE, E_rad, X_rad)
    return mix(E, S, S_rad, absE, E_rad)


def _attention(E, X, W_K, W_Q, absE, E_rad, X_rad) -> tuple[np.ndarray, np.ndarray]:
    """The softmax of :func:`head_features`, enclosed: ``(S, S_rad)``, (T, heads, n) each. (Its
    own function, and :func:`_softmax`'s, so that each step's arrays go when it returns.)"""
    T, n, d = E.shape
    heads, _, d_h = W_Q.shape
    queries = np.concatenate(list(W_Q), axis=1)                      # (d, heads·d_h)
    v, v_rad = matmul(X, X_rad, queries)                              # W_Q^T x
    v, v_rad = (a.reshape(T, heads, d_h).transpose(1, 0, 2) for a in (v, v_rad))
    w, w_rad = matmul(v, v_rad, W_K.transpose(0, 2, 1))               # W_K W_Q^T x, (heads, T, d)
    w, w_rad = (a.transpose(1, 0, 2) for a in (w, w_rad))             # (T, heads, d)
    absE_T = absE.transpose(0, 2, 1)
    L = w @ E.transpose(0, 2, 1)                                      # (T, heads, n)
    L_rad = gamma(d) * (np.abs(w) @ absE_T) + w_rad @ absE_T
    if E_rad is not None:                                             # |ΔE·w_exact| ≤ E_rad (|w| + w_rad)
        L_rad = L_rad + up(np.abs(w) + w_rad, 1) @ E_rad.transpose(0, 2, 1)
    return _softmax(L, up(L_rad, d if E_rad is None else d + 1))


def _softmax(L: np.ndarray, L_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enclosure ``(S, S_rad)`` of the softmax over the last axis of every ``ℓ`` within ``L_rad``
    of ``L``."""
    n = L.shape[-1]
    shifted = L - L.max(axis=-1, keepdims=True)                       # one rounding: ≤ u|shifted|
    s_rad = L_rad + U * np.abs(shifted) * (1 + 4 * U)
    widen = s_rad * (1 + 4 * U) + TINY                                # past s_rad's own rounding
    e_lo, e_hi = exp_around(shifted, widen)
    # Sums of positive numbers: relative error ≤ γ_n; each division one more rounding.
    sum_lo = e_lo.sum(axis=-1, keepdims=True) * (1 - 2 * gamma(n + 1))
    sum_hi = e_hi.sum(axis=-1, keepdims=True) * (1 + 2 * gamma(n + 1))
    S_lo = np.maximum(e_lo / sum_hi * (1 - 4 * U), 0.0)
    S_hi = np.minimum(e_hi / np.maximum(sum_lo, TINY) * (1 + 4 * U), 1.0)
    S_mid = (S_lo + S_hi) / 2
    return S_mid, (S_hi - S_lo) / 2 * (1 + 4 * U) + 2 * U * S_mid


def mix(E: np.ndarray, S: np.ndarray, S_rad: np.ndarray, absE: np.ndarray | None = None,
        E_rad: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Enclosure of ``E^(t)T s_h^(t)`` (T, heads, d) for every ``s_h^(t)`` within ``S_rad`` of ``S``
    (T, heads, n), ``S ≥ 0``: ``fl(E^T S)`` is within ``γ_n |E|^T S`` of ``E^T S``, which is
    within ``|E|^T S_rad`` of ``E^T s``. ``absE``: ``|E|``, when the caller has it; ``E_rad``:
    as in :func:`features`."""
    n = E.shape[1]
    absE = np.abs(E) if absE is None else absE
    z = S @ E
    z_rad = S_rad @ absE + gamma(n) * (S @ absE)
    if E_rad is not None:                                             # |ΔE^T s_exact| ≤ E_rad^T (S + S_rad)
        z_rad = z_rad + up(S + S_rad, 1) @ E_rad
    return z, up(z_rad, n if E_rad is None else n + 1)


def mean_shift(E: np.ndarray, X: np.ndarray):
    """Enclosure of Proposition 4's layer's exact outputs ``(E + 1 m^T, x + m)``, ``m = mean_i e_i``.

    ``m`` is the layer's own head with zero logits (:func:`features` with zero key and query
    maps, so its softmax's enclosure covers ``1/n``); adding it rounds once more. Returns
    ``(E', E'_rad, X', X'_rad)``.
    """
    zero = np.zeros((X.shape[-1], 1))
    m, m_rad = features(E, X, zero, zero)
    E2, X2 = E + m[:, None, :], X + m
    return E2, up(U * np.abs(E2) + m_rad[:, None, :], 1), X2, up(U * np.abs(X2) + m_rad, 1)


def gram_eigenvalue_lower(diagonal: np.ndarray, shift: float, k: int) -> float:
    """A lower bound on ``λ_min(Z Z^T)`` (0 when none is proven), given that a floating-point
    Cholesky factorization of ``fl(G − shift·I)`` ran to completion, where ``G = fl(Z Z^T)`` was
    formed by ``k``-term dot products (any order, with or without FMA) and ``diagonal`` is ``G``'s.

    The rounding is bounded from the diagonal alone (Rump's verified positive definiteness):

    - forming ``G``: ``|G − Z Z^T| ≤ γ_k |Z| |Z|^T``, whose 2-norm is at most
      ``γ_k ‖Z‖_F² ≤ γ_k tr(G) / (1 − γ_k)``;
    - the shift: ``fl(g_ii − shift)`` is within ``u`` of its value, relatively;
    - Cholesky (Higham, Thm 10.3): ``R^T R = A + ΔA`` with ``|ΔA| ≤ γ_{T+1} |R^T| |R|``, so
      ``‖ΔA‖_2 ≤ γ_{T+1} ‖R‖_F²``, and ``‖R‖_F² = tr(A + ΔA) ≤ Σ|a_ii| / (1 − γ_{T+1})``;
    - underflow: ``k·TINY`` per entry of ``G``, ``T·TINY·max|r_ij|`` per entry of ``ΔA``.

    ``R^T R`` is positive semidefinite, so ``λ_min(Z Z^T) ≥ shift − (sum of the four)``.
    """
    T = diagonal.size
    tr_G = float(up(np.array(diagonal.sum()), T))
    a = np.abs(diagonal - shift)
    tr_A = float(up(np.array(a.sum()), T))
    d_form = gamma(k) * tr_G / (1 - gamma(k)) + T * k * TINY
    d_shift = 2 * U * float(a.max(initial=0.0))
    # an entry of R that underflows (by at most TINY) moves R^T R by at most TINY·max|r|
    d_chol = gamma(T + 1) * tr_A / (1 - gamma(T + 1)) + T * T * TINY * (1 + math.sqrt(tr_A))
    err = (d_form + d_shift + d_chol) * (1 + 8 * U)
    return max(0.0, (shift - err) * (1 - 2 * U))
